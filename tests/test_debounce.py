"""Debounce, ``Unique(key=..., on_conflict="replace")``, on both backends: a second
enqueue with the key while the first job still waits replaces its arguments and run
time and returns the same job; once the first has started a new job goes in. Race-free
across processes (one conditional UPDATE), with ``enqueue``, ``enqueue_async`` and
``enqueue_many``; ``drain()`` runs the debounced job once, with the last arguments."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from conveyor import Conveyor, Job, JobState, Unique
from conveyor._storage import JobAck, JobAckManyParams, JobFetchAvailableParams
from conveyor.testing import VirtualClock

from ._runtime_util import gather_reports
from .apps import debounce_app


def _get(app: Conveyor, job_id: int) -> Job:
    job = app.get_job(job_id)
    assert job is not None
    return job


# -- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["merge", "REPLACE", "", None, 1, True])
def test_an_unknown_on_conflict_is_refused(value: Any) -> None:
    with pytest.raises(ValueError, match="on_conflict must be 'keep' or 'replace'"):
        Unique(on_conflict=value)


def test_replace_holds_its_key_only_while_the_job_waits() -> None:
    assert Unique(on_conflict="replace").states == ("scheduled", "available", "retryable")
    assert Unique(on_conflict="replace", states=("scheduled",)).states == ("scheduled",)
    with pytest.raises(ValueError, match="only while the job waits"):
        Unique(on_conflict="replace", states=("scheduled", "running"))
    with pytest.raises(TypeError, match=r"Unique\.states"):
        Unique(states="available")  # type: ignore[arg-type]
    assert Unique().on_conflict == "keep"


# -- one process -------------------------------------------------------------------------


def test_fifty_enqueues_run_once_after_the_last_with_its_arguments(db_url: str) -> None:
    clock = VirtualClock()
    app = Conveyor(db_url, clock=clock)
    ran: list[tuple[int, str]] = []
    try:
        @app.task(unique=Unique(key=lambda doc_id, text: str(doc_id), on_conflict="replace"))
        def search_index(doc_id: int, text: str) -> None:
            ran.append((doc_id, text))

        jobs = [search_index.options(delay=5).enqueue(7, f"text {i}") for i in range(50)]
        other = search_index.options(delay=5).enqueue(8, "other doc")
        assert {j.id for j in jobs} == {jobs[0].id} and other.id != jobs[0].id
        assert not jobs[0].duplicate and all(j.duplicate for j in jobs[1:])
        stored = _get(app, jobs[0].id)
        assert stored.args == [7, "text 49"] and stored.state is JobState.SCHEDULED
        # due 5 s after the last call (the returned job is the row as replaced), not the first
        assert stored.scheduled_at == jobs[-1].scheduled_at > jobs[0].scheduled_at
        assert stored.scheduled_at - jobs[0].created_at >= timedelta(seconds=5)
        assert app.drain().completed == []
        clock.advance(seconds=5.5)
        done = app.drain()
        assert sorted(o.job.args[0] for o in done.completed) == [7, 8]
        assert sorted(ran) == [(7, "text 49"), (8, "other doc")]
        assert app.count_jobs().get("completed") == 2
    finally:
        app.close()


def test_keep_stays_the_default(app: Conveyor) -> None:
    @app.task(unique=Unique(key=lambda n, text: str(n)))
    def kept(n: int, text: str) -> None: ...

    first = kept.options(delay=60).enqueue(1, "first")
    second = kept.options(delay=5).enqueue(1, "second")
    assert second.id == first.id and second.duplicate
    stored = _get(app, first.id)
    assert stored.args == [1, "first"] and stored.scheduled_at == first.scheduled_at


def test_once_started_a_new_enqueue_is_a_new_job(app: Conveyor) -> None:
    debounce = _task(app)
    first = debounce.enqueue(7, "a", tag="a")

    async def claim() -> list[Job]:
        try:
            storage = await app.storage()
            return await storage.job_fetch_available(
                JobFetchAvailableParams("default", 10, "node-a", 30.0))
        finally:
            await app.close_async()

    claimed = asyncio.run(claim())
    assert [j.id for j in claimed] == [first.id]
    second = debounce.enqueue(7, "b", tag="b")
    third = debounce.enqueue(7, "c", tag="c")
    assert second.id != first.id and third.id == second.id
    assert _get(app, first.id).args == [7, "a"]  # the running one is untouched
    assert _get(app, first.id).state is JobState.RUNNING
    assert _get(app, second.id).args == [7, "c"]


def test_a_retryable_holder_is_replaced(app: Conveyor) -> None:
    debounce = _task(app)
    first = debounce.enqueue(7, "a", tag="a")

    async def fail_once() -> None:
        try:
            storage = await app.storage()
            (job,) = await storage.job_fetch_available(
                JobFetchAvailableParams("default", 10, "node-a", 30.0))
            await storage.job_ack_many(JobAckManyParams([JobAck(
                job.id, job.lease_token or 0, JobState.RETRYABLE, delay=3600.0,
                error_json='{"error": "boom"}')]))
        finally:
            await app.close_async()

    asyncio.run(fail_once())
    assert _get(app, first.id).state is JobState.RETRYABLE
    again = debounce.enqueue(7, "b", tag="b")
    assert again.id == first.id
    stored = _get(app, first.id)
    assert stored.args == [7, "b"] and stored.state is JobState.AVAILABLE
    assert stored.attempt == 1  # the same job: its attempts and errors stay


def test_enqueue_async_and_enqueue_many_replace_too(app: Conveyor) -> None:
    debounce = _task(app)

    async def main() -> list[Job]:
        try:
            first = await debounce.options(delay=30).enqueue_async(7, "a", tag="a")
            again = await debounce.options(delay=30).enqueue_async(7, "b", tag="b")
            assert again.id == first.id and again.duplicate
            return [first, again]
        finally:
            await app.close_async()

    (first, _) = asyncio.run(main())
    batch = app.enqueue_many([debounce.options(delay=30).job(7, f"m{i}", tag=f"m{i}")
                              for i in range(5)] + [debounce.job(9, "x", tag="x")])
    assert [j.id for j in batch[:5]] == [first.id] * 5
    assert all(j.duplicate for j in batch[:5]) and not batch[5].duplicate
    assert _get(app, first.id).args == [7, "m4"]
    fresh = app.enqueue_many([debounce.job(11, f"n{i}", tag=f"n{i}") for i in range(3)])
    assert len({j.id for j in fresh}) == 1 and _get(app, fresh[0].id).args == [11, "n2"]
    assert [j.duplicate for j in fresh] == [True, True, False]
    assert app.count_jobs().get("scheduled", 0) + app.count_jobs().get("available", 0) == 3


def _task(app: Conveyor) -> Any:
    @app.task(unique=Unique(key=lambda doc_id, text, tag="": str(doc_id), on_conflict="replace"))
    def search_index(doc_id: int, text: str, tag: str = "") -> str:
        assert tag == text, (text, tag)
        return text

    return search_index


# -- replace racing a claim ---------------------------------------------------------------------


def test_replace_racing_claims_never_runs_half_old_arguments(db_url: str) -> None:
    """A thread replaces as fast as it can while another claims and completes: every
    claimed job carries the arguments and keyword arguments of one enqueue (args and
    kwargs are written by one statement), and each claim is of a job that then leaves
    the key, so the next enqueue makes a new one."""
    debounce = debounce_app.build(db_url)
    app, task = debounce.app, debounce.index
    stop = threading.Event()
    claimed: list[Job] = []
    errors: list[BaseException] = []

    def replacer() -> None:
        n = 0
        try:
            while not stop.is_set():
                task.enqueue(7, f"v{n}", tag=f"v{n}")
                n += 1
        except BaseException as exc:  # reported below
            errors.append(exc)

    async def claimer() -> None:
        storage = await app.storage()
        deadline = time.monotonic() + 6.0
        while time.monotonic() < deadline and not errors:
            jobs = await storage.job_fetch_available(
                JobFetchAvailableParams("default", 10, "node-a", 30.0))
            claimed.extend(jobs)
            if jobs:
                await storage.job_ack_many(JobAckManyParams(
                    [JobAck(j.id, j.lease_token or 0, JobState.COMPLETED) for j in jobs]))
            await asyncio.sleep(0.001)
        await app.close_async()

    thread = threading.Thread(target=replacer)
    thread.start()
    try:
        asyncio.run(claimer())
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not errors, errors
    assert len(claimed) >= 2, "the race never claimed"
    for job in claimed:
        assert job.args[1] == job.kwargs["tag"], job
    assert len({j.id for j in claimed}) == len(claimed)  # never claimed twice
    live = [j for j in app.list_jobs(limit=1000) if not j.state.is_final]
    assert len(live) <= 1  # at most one job waits for the key
    app.close()


# -- two processes -----------------------------------------------------------------------


def test_two_processes_debouncing_one_key_make_exactly_one_job(db_url: str) -> None:
    rounds = 60
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    results: Any = ctx.Queue()
    procs = [ctx.Process(target=debounce_app.hammer,
                         args=(db_url, who, rounds, 60.0, barrier, results))
             for who in ("a", "b")]
    got: list[tuple[str, int, int, bool, int]] = gather_reports(
        procs, results, 2 * rounds, timeout=120, join_timeout=60)
    debounce = debounce_app.build(db_url)
    try:
        ids = {job_id for _, _, job_id, _, _ in got}
        assert len(ids) == 1, f"{len(ids)} jobs for one key: {sorted(ids)[:10]}"
        assert sum(1 for _, _, _, duplicate, _ in got if not duplicate) == 1
        assert len({pid for *_, pid in got}) == 2
        (job_id,) = ids
        rows = debounce.app.list_jobs(limit=100)
        assert [j.id for j in rows] == [job_id]
        # the last write of either process won, whole
        stored = _get(debounce.app, job_id)
        assert stored.args[1] in (f"a-{rounds - 1}", f"b-{rounds - 1}"), stored.args
        assert stored.kwargs == {"tag": stored.args[1]}
        # and a write after both is the last: its arguments win
        final = debounce.index.options(delay=60).enqueue(7, "final", tag="final")
        assert final.id == job_id and _get(debounce.app, job_id).args == [7, "final"]
    finally:
        debounce.app.close()


def test_a_replacement_takes_the_new_expiry_and_fair_key(app: Conveyor) -> None:
    @app.task(unique=Unique(key=lambda doc_id, tenant: str(doc_id), on_conflict="replace"),
              fair_key=lambda doc_id, tenant: tenant)
    def index(doc_id: int, tenant: str) -> None: ...

    first = index.options(expires_in=600).enqueue(7, "acme")
    again = index.options(expires_in=60).enqueue(7, "globex")
    assert again.id == first.id
    stored = _get(app, first.id)
    assert stored.args == [7, "globex"] and stored.fair_key == "globex"
    assert first.expires_at is not None and stored.expires_at is not None
    assert (first.expires_at - stored.expires_at).total_seconds() > 500
    plain = index.enqueue(7, "initech")  # no expiry this time: the replacement has none
    assert plain.id == first.id and _get(app, first.id).expires_at is None
