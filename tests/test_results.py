"""Results you can wait for (docs/results.md): job.wait, wait_async, app.wait_jobs, on
both backends, woken by finish notifications, with real workers (a thread, a process)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from conveyor import (
    Cancel,
    Conveyor,
    DatabaseUnavailableError,
    Discard,
    Job,
    JobCancelledError,
    JobDiscardedError,
    JobFailedError,
    JobNotFoundError,
    JobState,
    WaitTimeoutError,
)
from conveyor._app.results import POLLED_RECHECK, Waiter

from ._runtime_util import FAST, aio
from .conftest import wait_for_async


@dataclasses.dataclass(frozen=True)
class Report:
    title: str
    made_at: datetime


def define(app: Conveyor) -> dict[str, Any]:
    @app.task
    def build_report(title: str) -> Report:
        return Report(title, datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))

    @app.task
    def stamp() -> datetime:
        return datetime(2026, 5, 6, 7, 8, 9, tzinfo=UTC)

    @app.task(max_attempts=1)
    def explode(n: int) -> int:
        raise ValueError(f"bad input {n}")

    @app.task
    def refuse() -> None:
        raise Discard("recipient does not exist")

    @app.task
    def withdraw() -> None:
        raise Cancel("order was refunded")

    @app.task
    def add(a: int, b: int) -> int:
        return a + b

    return {"build_report": build_report, "stamp": stamp, "explode": explode,
            "refuse": refuse, "withdraw": withdraw, "add": add}


@contextlib.contextmanager
def worker_thread(app: Conveyor) -> Iterator[None]:
    """A real worker on a thread of its own (its own loop and storage)."""
    ready = threading.Event()
    box: dict[str, Any] = {}

    def main() -> None:
        async def run() -> None:
            box["stop"], box["loop"] = asyncio.Event(), asyncio.get_running_loop()
            ready.set()
            try:
                await app.run_worker(config=FAST, stop=box["stop"])
            finally:
                await app.close_async()

        asyncio.run(run())

    thread = threading.Thread(target=main, name="test-worker")
    thread.start()
    assert ready.wait(10)
    try:
        yield
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(30)
        assert not thread.is_alive()


def test_wait_returns_a_typed_result_from_a_worker_thread(app: Conveyor) -> None:
    tasks = define(app)
    with worker_thread(app):
        job = tasks["build_report"].enqueue("q3")
        done = job.wait(timeout=20)
        assert done.state is JobState.COMPLETED
        assert done.result == Report("q3", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
        assert isinstance(done.result, Report)
        again = app.get_job(job.id)
        assert again is not None
        assert again.wait(timeout=5).result == done.result  # already final: at once
        assert tasks["stamp"].enqueue().wait(timeout=20).result == datetime(
            2026, 5, 6, 7, 8, 9, tzinfo=UTC)
    assert "_waiter" not in done.to_dict() and "Conveyor" not in repr(done)


@aio
async def test_wait_async_with_a_worker_on_the_same_loop(app: Conveyor) -> None:
    tasks = define(app)
    stop = asyncio.Event()
    worker = asyncio.create_task(app.run_worker(config=FAST, stop=stop))
    try:
        job = await tasks["add"].enqueue_async(2, 3)
        done = await job.wait_async(timeout=20)
        assert (done.state, done.result) == (JobState.COMPLETED, 5)
        listed = await app.list_jobs_async()
        assert (await listed[0].wait_async(timeout=5)).result == 5
    finally:
        stop.set()
        await asyncio.wait_for(worker, 30)


def test_wait_jobs_keeps_the_order_and_reports_mixed_outcomes(app: Conveyor) -> None:
    tasks = define(app)
    with worker_thread(app):
        jobs = [tasks["add"].enqueue(i, 1) for i in range(5)]
        bad = tasks["explode"].enqueue(7)
        finished = app.wait_jobs([*reversed(jobs), bad.id], timeout=20, raise_failed=False)
        assert [j.id for j in finished] == [*(j.id for j in reversed(jobs)), bad.id]
        assert [j.result for j in finished[:5]] == [5, 4, 3, 2, 1]
        assert finished[5].state is JobState.DISCARDED
        with pytest.raises(JobDiscardedError) as raised:
            app.wait_jobs([jobs[0], bad], timeout=20)
        assert raised.value.job.id == bad.id


def test_discarded_and_cancelled_raise_with_the_last_error(app: Conveyor) -> None:
    tasks = define(app)
    with worker_thread(app):
        with pytest.raises(JobDiscardedError) as discarded:
            tasks["explode"].enqueue(3).wait(timeout=20)
        text = str(discarded.value)
        assert "ValueError: bad input 3" in text and "Traceback" in text
        assert isinstance(discarded.value, JobFailedError)
        assert discarded.value.job.state is JobState.DISCARDED
        with pytest.raises(JobDiscardedError, match="recipient does not exist"):
            tasks["refuse"].enqueue().wait(timeout=20)
        with pytest.raises(JobCancelledError, match="order was refunded"):
            tasks["withdraw"].enqueue().wait(timeout=20)


def test_a_timeout_raises_and_leaves_the_job_as_it_is(app: Conveyor) -> None:
    tasks = define(app)
    job = tasks["add"].enqueue(1, 2)  # no worker runs
    started = time.monotonic()
    with pytest.raises(WaitTimeoutError) as raised:
        job.wait(timeout=0.3)
    assert isinstance(raised.value, TimeoutError)
    assert 0.3 <= time.monotonic() - started < 5
    after = app.get_job(job.id)
    assert after is not None
    assert (after.state, after.attempt, after.errors) == (JobState.AVAILABLE, 0, [])
    app.cancel_job(job.id)  # an operator's cancel wakes a later wait
    with pytest.raises(JobCancelledError):
        job.wait(timeout=10)


CANCEL_ELSEWHERE = """
import sys, time
from conveyor import Conveyor
app = Conveyor(sys.argv[1])
app.get_job(1)  # connected before the clock starts
time.sleep(float(sys.argv[3]))
started = time.time()
app.cancel_job(int(sys.argv[2]))
print(started, flush=True)
app.close()
"""


@aio
async def test_a_finish_in_another_process_wakes_the_waiter_promptly(
        app: Conveyor, db_url: str) -> None:
    job = await define(app)["add"].enqueue_async(1, 1)
    storage = await app.storage()
    notified = storage.capabilities.remote_finish_wakes
    if notified:  # re-checks far apart: only the NOTIFY can wake the waiter in time
        app._waiter(storage).recheck = (10.0, 10.0)
    first = 10.0 if notified else POLLED_RECHECK[1]
    proc = subprocess.Popen([sys.executable, "-c", CANCEL_ELSEWHERE, db_url, str(job.id),
                             "1.0"], stdout=subprocess.PIPE, text=True)
    try:
        with pytest.raises(JobCancelledError):
            await job.wait_async(timeout=30)
        woken = time.time()
        out, _ = await asyncio.to_thread(proc.communicate, timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    latency = woken - float(out.split()[-1])
    # PostgreSQL: the NOTIFY, long before the re-check (10 s after the wait's first
    # read); SQLite: the bounded poll, its reads at most 1 s apart.
    assert latency < (1.0 if notified else first + 0.5), \
        f"woken {latency:.3f}s after the cancel (re-check interval {first}s)"


@aio
async def test_500_concurrent_waits_cost_a_bounded_number_of_queries(app: Conveyor) -> None:
    tasks = define(app)
    jobs = await app.enqueue_many_async([tasks["add"].job(i, 0) for i in range(500)])
    waiter = app._waiter(await app.storage())
    stop = asyncio.Event()
    waits = [asyncio.create_task(job.wait_async(timeout=60)) for job in jobs]
    await asyncio.sleep(0)  # every wait registered before the worker starts
    worker = asyncio.create_task(app.run_worker(config=FAST, stop=stop))
    try:
        finished = await asyncio.gather(*waits)
    finally:
        stop.set()
        await asyncio.wait_for(worker, 30)
    assert [j.result for j in finished] == list(range(500))
    assert isinstance(waiter, Waiter)
    # one read per wake-up (a completion batch, or a re-check), not one per wait
    assert 1 <= waiter.reads <= 150, waiter.reads


def test_wrong_input_is_refused_clearly(app: Conveyor) -> None:
    tasks = define(app)
    with pytest.raises(TypeError, match="list of jobs or job ids"):
        app.wait_jobs(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="positive int job id"):
        app.wait_jobs(["7"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="timeout"):
        app.wait_job(1, timeout=-1)
    with pytest.raises(TypeError, match="timeout"):
        app.wait_job(1, timeout="soon")  # type: ignore[arg-type]
    with pytest.raises(JobNotFoundError, match="no job with id 999999"):
        app.wait_job(999999, timeout=10)
    job = tasks["add"].enqueue(1, 1)
    with pytest.raises(JobNotFoundError):
        app.wait_jobs([job, 999999], timeout=10)
    loose = dataclasses.replace(job, _waiter=None)
    with pytest.raises(RuntimeError, match="not read through an app"):
        loose.wait(timeout=1)
    assert app.get_job(job.id) == job  # nothing was changed by the refusals


def test_a_dead_database_raises_database_unavailable(tmp_path: Any) -> None:
    app = Conveyor("postgresql://postgres@127.0.0.1:1/nothing")
    try:
        with pytest.raises(DatabaseUnavailableError):
            app.wait_job(1, timeout=5)
    finally:
        app.close()
    missing = Conveyor(f"sqlite:///{tmp_path}/no/such/dir/jobs.db")
    try:
        with pytest.raises(DatabaseUnavailableError):
            missing.wait_job(1, timeout=5)
    finally:
        missing.close()


def test_inline_mode_jobs_can_wait_too(app: Conveyor) -> None:
    tasks = define(app)
    with app.inline():
        assert tasks["stamp"].enqueue().wait(timeout=5).result == datetime(
            2026, 5, 6, 7, 8, 9, tzinfo=UTC)
        with pytest.raises(JobDiscardedError, match="bad input 1"):
            tasks["explode"].enqueue(1).wait(timeout=5)


def test_a_pickled_job_leaves_its_app_behind(app: Conveyor) -> None:
    import pickle

    job = define(app)["add"].enqueue(1, 2)
    copy: Job = pickle.loads(pickle.dumps(job))
    assert copy == job and copy._waiter is None


class CountedReads:
    """Counts a waiter's finished reads: a test acts once the wait's first read is done
    (the job was read not final), not after a guessed sleep."""

    def __init__(self, waiter: Waiter) -> None:
        self.done = 0
        self._read = waiter._read
        setattr(waiter, "_read", self.read)  # noqa: B010 (an instance's method, replaced)

    async def read(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await self._read(*args, **kwargs)
        finally:
            self.done += 1


def counted_reads(waiter: Waiter) -> CountedReads:
    return CountedReads(waiter)


async def first_read_done(reads: CountedReads) -> None:
    await wait_for_async(lambda: reads.done >= 1, timeout=10, message="the wait's first read")


@aio
async def test_a_worker_of_this_process_wakes_the_waiter_without_a_recheck(
        app: Conveyor) -> None:
    """SQLite: the in-process wake after the ack's commit; PostgreSQL: the NOTIFY."""
    tasks = define(app)
    job = await tasks["add"].enqueue_async(20, 22)
    waiter = app._waiter(await app.storage())
    waiter.recheck = (30.0, 30.0)  # only a wake-up can help
    reads = counted_reads(waiter)
    wait = asyncio.create_task(job.wait_async(timeout=60))
    await first_read_done(reads)  # the job was read not final
    assert not wait.done()
    with worker_thread(app):
        started = time.monotonic()
        done = await asyncio.wait_for(wait, 20)
        assert time.monotonic() - started < 10, "woken by the re-check, not a notification"
    assert done.result == 42


@aio
async def test_a_deleted_job_fails_its_wait_at_the_next_recheck(app: Conveyor) -> None:
    job = await define(app)["add"].enqueue_async(1, 2)
    waiter = app._waiter(await app.storage())
    waiter.recheck = (0.2, 0.2)
    reads = counted_reads(waiter)
    wait = asyncio.create_task(job.wait_async(timeout=30))
    await first_read_done(reads)  # read while it existed: only the re-check can tell
    await app.delete_job_async(job.id)
    with pytest.raises(JobNotFoundError, match=f"no job with id {job.id}"):
        await asyncio.wait_for(wait, 10)


@aio
async def test_postgres_listens_to_the_finished_channel_only_while_someone_waits(
        app: Conveyor, db_url: str) -> None:
    if not db_url.startswith("postgres"):
        pytest.skip("LISTEN is PostgreSQL's")
    import psycopg

    async def listening() -> int:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND query = %s",
                ['LISTEN "conveyor_jobs_finished"'])
            row = await cur.fetchone()
            return int(row[0]) if row else 0

    job = await define(app)["add"].enqueue_async(1, 2)
    assert await listening() == 0
    wait = asyncio.create_task(job.wait_async(timeout=30))
    deadline = time.monotonic() + 10
    while await listening() != 1:
        assert time.monotonic() < deadline, "no LISTEN connection while waiting"
        await asyncio.sleep(0.05)
    await app.cancel_job_async(job.id)
    with pytest.raises(JobCancelledError):
        await wait
    while await listening() != 0:
        assert time.monotonic() < deadline + 10, "the LISTEN connection outlived the wait"
        await asyncio.sleep(0.05)


@aio
async def test_an_operator_discard_and_a_rescue_to_discarded_wake_waiters(
        app: Conveyor) -> None:
    """The other final-state writes notify too (re-checks 30 s apart: only a wake-up
    can end these waits in time)."""
    from conveyor._storage import JobFetchAvailableParams, JobRescueExpiredParams

    tasks = define(app)
    storage = await app.storage()
    waiter = app._waiter(storage)
    waiter.recheck = (30.0, 30.0)
    reads = counted_reads(waiter)
    queued = await tasks["add"].enqueue_async(1, 1)
    wait = asyncio.create_task(queued.wait_async(timeout=60))
    await first_read_done(reads)
    await app.discard_job_async(queued.id, reason="not needed")
    with pytest.raises(JobDiscardedError, match="discarded by an operator: not needed"):
        await asyncio.wait_for(wait, 10)

    lost = await tasks["explode"].enqueue_async(5)  # max_attempts=1: a rescue discards
    (claimed,) = await storage.job_fetch_available(
        JobFetchAvailableParams("default", 1, "gone-node", lease_ttl=0.2))
    assert claimed.id == lost.id
    wait = asyncio.create_task(lost.wait_async(timeout=60))
    rescued: list[int] = []
    deadline = time.monotonic() + 10
    while not rescued:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
        rescued = await storage.job_rescue_expired(JobRescueExpiredParams())
    with pytest.raises(JobDiscardedError, match="lease expired"):
        await asyncio.wait_for(wait, 10)
