"""Issue 14, correctness: rolling deploys, late cancels and shutdown reaching handlers,
with in-process workers on both backends (the cluster-wide Throttle:
tests/test_fidelity_throttle.py).

The same behaviours across real ``conveyor worker`` processes (two task sets, a real
SIGTERM, two nodes sharing a cool-down) are in tests/test_fidelity_processes.py.
Every wait is a condition with a deadline; handlers wait on events the test controls.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import pytest

from conveyor import Conveyor, JobState, Snooze, WorkerConfig, current_job
from conveyor._context import JobContext
from conveyor._job import Job
from conveyor._runtime import Worker
from conveyor._storage import (
    JobAck,
    JobAckManyParams,
    JobFetchAvailableParams,
)

from ._runtime_util import FAST, in_state, run_worker_until
from .conftest import wait_for_async

Check = Callable[[], Awaitable[bool]]


async def until(check: Check, timeout: float = 15.0, message: str = "") -> None:
    await wait_for_async(check, timeout=timeout, interval=0.01, message=message)


async def job_of(app: Conveyor, job_id: int) -> Job:
    job = await app.get_job_async(job_id)
    assert job is not None
    return job


async def start_worker(app: Conveyor, config: WorkerConfig) -> tuple[Worker, asyncio.Task[None]]:
    worker = Worker(app.registry, await app.storage(), config)
    return worker, asyncio.create_task(worker.run())


async def stop_worker(worker: Worker, task: asyncio.Task[None]) -> None:
    worker.request_stop()
    await asyncio.wait_for(task, timeout=30)


# -- 1. rolling deploys: a task this worker does not know ------------------------------------


def test_a_job_of_an_unknown_task_waits_without_using_an_attempt_then_is_discarded(
        app: Conveyor, db_url: str) -> None:
    """The worker does not know ``fid_later``: the job goes back (attempt given back, the
    first meeting recorded with its deadline), explain_job says why, and once
    ``unknown_task_timeout`` has passed since the first meeting it ends discarded."""
    other = Conveyor(db_url)
    later = other.task(name="fid_later")(lambda: "ran")

    async def main() -> None:
        job = await later.enqueue_async()
        worker, task = await start_worker(app, dataclasses.replace(FAST, unknown_task_timeout=3.0))
        try:
            async def met() -> bool:
                j = await job_of(app, job.id)
                return bool(j.errors) and j.state in (JobState.SCHEDULED, JobState.AVAILABLE)

            await until(met, message="the worker to give the job back")
            waiting = await job_of(app, job.id)
            assert waiting.attempt == 0, "waiting for a worker that knows the task used an attempt"
            entry = waiting.errors[0]
            assert entry["unknown_task"] == "fid_later"
            assert "waits for a worker that knows it" in entry["error"]
            first = datetime.fromisoformat(entry["first_met"])
            assert (datetime.fromisoformat(entry["discard_at"]) - first).total_seconds() == 3.0
            why = await app.explain_job_async(job.id)
            text = "\n".join(why.reasons)
            assert "no live worker knows task 'fid_later'" in text, why
            assert "is discarded at" in text, why
            await until(in_state(app, job, JobState.DISCARDED), timeout=20,
                        message="the job to be discarded after unknown_task_timeout")
        finally:
            await stop_worker(worker, task)
        final = await job_of(app, job.id)
        assert final.attempt == 1
        assert "unknown_task_timeout" in final.errors[-1]["error"]
        assert "unknown_task" not in final.errors[-1]  # a retry starts a new wait
        waited = (final.finished_at - first).total_seconds() if final.finished_at else 0.0
        assert waited >= 3.0 - 0.2, f"discarded {waited:.2f}s after the first meeting"
        await app.close_async()

    try:
        asyncio.run(main())
    finally:
        other.close()


def test_a_job_that_waited_for_its_task_runs_on_a_worker_that_knows_it(app: Conveyor,
                                                                       db_url: str) -> None:
    """An old worker (no ``fid_new``) gives the job back; a new one, started later on the
    same database, runs it with its first attempt."""
    old = Conveyor(db_url)
    old.task(name="fid_old")(lambda: None)

    @app.task(name="fid_new")
    def fid_new(x: int) -> int:
        return x * 2

    async def main() -> None:
        job = await fid_new.enqueue_async(21)
        worker, task = await start_worker(old, FAST)
        try:
            async def met() -> bool:
                return bool((await job_of(app, job.id)).errors)

            await until(met, message="the old worker to meet the job")
        finally:
            await stop_worker(worker, task)
        assert (await job_of(app, job.id)).state == JobState.SCHEDULED
        await run_worker_until(app, in_state(app, job, JobState.COMPLETED))
        done = await job_of(app, job.id)
        assert done.result == 42 and done.attempt == 1
        await app.close_async()
        await old.close_async()

    asyncio.run(main())


def test_unknown_task_timeout_is_checked_and_has_help() -> None:
    from click.testing import CliRunner

    from conveyor.cli import cli

    shown = CliRunner().invoke(cli, ["worker", "--help"], terminal_width=200)
    assert shown.exit_code == 0
    assert "--unknown-task-timeout" in shown.output and "rolling deploys" in shown.output
    bad = CliRunner().invoke(cli, ["worker", "--unknown-task-timeout", "-1", "x:app"])
    assert bad.exit_code == 2 and "unknown-task-timeout" in bad.output
    with pytest.raises(ValueError, match="unknown_task_timeout"):
        WorkerConfig(unknown_task_timeout=-1)
    with pytest.raises(ValueError, match="unknown_task_timeout"):
        WorkerConfig(unknown_task_timeout=float("inf"))
    field = {f.name: f for f in dataclasses.fields(WorkerConfig)}["unknown_task_timeout"]
    assert field.default == 3600.0 and "rolling deploys" in field.metadata["help"]


# -- 2. a late cancel never overwrites success -------------------------------------------------


def test_a_sync_handler_that_returns_after_a_cancel_ends_completed_with_its_result(
        app: Conveyor) -> None:
    """The cancel is delivered (the heartbeat stops the execution) while the handler waits
    on an event the test holds; then the handler returns: completed, with its result."""
    release = threading.Event()

    @app.task
    def report() -> str:
        assert release.wait(30), "never released"
        return "report done"

    async def main() -> None:
        job = await report.enqueue_async()
        worker, task = await start_worker(app, FAST)
        try:
            await until(in_state(app, job, JobState.RUNNING))
            await app.cancel_job_async(job.id)

            async def delivered() -> bool:
                ex = worker._executions.get(job.id)
                return ex is not None and ex.stop_reason == "cancel"

            await until(delivered, message="the heartbeat to deliver the cancel")
            release.set()
            await until(in_state(app, job, JobState.COMPLETED, JobState.CANCELLED))
        finally:
            release.set()
            await stop_worker(worker, task)
        final = await job_of(app, job.id)
        assert final.state == JobState.COMPLETED, final.errors
        assert final.result == "report done" and final.errors == []
        await app.close_async()

    asyncio.run(main())


def test_a_handler_that_honours_the_cancel_still_ends_cancelled(app: Conveyor) -> None:
    """The other side of the rule: an async handler interrupted by the cancel, and a sync
    one that read ``current_job().cancelled`` and returned, end cancelled."""
    started = threading.Event()

    @app.task
    async def forever() -> None:
        await asyncio.sleep(60)

    @app.task
    def polite() -> str:
        started.set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if current_job().cancelled:
                return "stopped early"
            time.sleep(0.005)
        return "ran out"

    async def main() -> None:
        a, s = await forever.enqueue_async(), await polite.enqueue_async()
        worker, task = await start_worker(app, FAST)
        try:
            for job in (a, s):
                await until(in_state(app, job, JobState.RUNNING))
                await app.cancel_job_async(job.id)
            for job in (a, s):
                await until(in_state(app, job, JobState.CANCELLED, JobState.COMPLETED))
        finally:
            await stop_worker(worker, task)
        for job in (a, s):
            assert (await job_of(app, job.id)).state == JobState.CANCELLED
        await app.close_async()

    asyncio.run(main())


def test_an_async_handler_that_finishes_despite_the_cancel_ends_completed(app: Conveyor) -> None:
    """An async handler that shields its last step from the cancel and returns; and one
    whose success is followed by a middleware still running when the cancel lands."""
    gate = asyncio.Event()

    @app.task
    async def commit() -> str:
        step = asyncio.ensure_future(gate.wait())
        try:
            await asyncio.shield(step)
        except asyncio.CancelledError:
            await step  # finish the step that was under way
        return "committed"

    after = asyncio.Event()

    @app.task
    async def quick() -> str:
        return "quick result"

    @app.add_middleware
    async def slow_after(ctx: JobContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
        result = await call_next()
        if ctx.task.endswith("quick"):
            await after.wait()  # the cancel lands here, after the handler returned
        return result

    async def main() -> None:
        c, q = await commit.enqueue_async(), await quick.enqueue_async()
        worker, task = await start_worker(app, FAST)
        try:
            for job in (c, q):
                await until(in_state(app, job, JobState.RUNNING))
                await app.cancel_job_async(job.id)

            async def delivered() -> bool:
                ex = worker._executions.get(c.id)
                return ex is not None and ex.stop_reason == "cancel"

            # ``quick``'s middleware gets the CancelledError after its handler returned:
            # it ends at once, completed; ``commit`` finishes once the gate opens.
            await until(delivered, message="the cancel to reach the shielded handler")
            await until(in_state(app, q, JobState.COMPLETED, JobState.CANCELLED))
            gate.set()
            after.set()
            for job in (c, q):
                await until(in_state(app, job, JobState.COMPLETED, JobState.CANCELLED))
        finally:
            gate.set()
            after.set()
            await stop_worker(worker, task)
        assert (await job_of(app, c.id)).result == "committed"
        assert (await job_of(app, q.id)).result == "quick result"
        for job in (c, q):
            assert (await job_of(app, job.id)).state == JobState.COMPLETED
        await app.close_async()

    asyncio.run(main())


@pytest.mark.parametrize("path", ["plain", "generic"])
def test_the_fenced_completion_keeps_success_over_a_cancel_request(app: Conveyor,
                                                                   path: str) -> None:
    """Storage: a completed outcome written after cancel_job flagged the running job is
    stored as completed with its result, through both completion statements."""
    @app.task(name="fid_done")
    def fid_done() -> None: ...

    async def main() -> None:
        job = await fid_done.enqueue_async()
        storage = await app.storage()
        [claimed] = await storage.job_fetch_available(
            JobFetchAvailableParams("default", 1, "node-x", 30.0))
        await app.cancel_job_async(job.id)
        assert (await job_of(app, job.id)).cancel_requested
        assert claimed.lease_token is not None
        # delay=0.0 is not a plain completion: it takes the generic job_ack statement.
        ack = JobAck(job.id, claimed.lease_token, JobState.COMPLETED, result_json='"ok"',
                     delay=None if path == "plain" else 0.0, run_time=0.01)
        applied = await storage.job_ack_many(JobAckManyParams([ack], "node-x"))
        assert applied == [job.id]
        final = await job_of(app, job.id)
        assert final.state == JobState.COMPLETED and final.result == "ok"
        assert final.finished_at is not None
        await app.close_async()

    asyncio.run(main())


# -- 3. shutdown reaches the handlers ----------------------------------------------------------


def test_handlers_see_the_shutdown_at_once_and_give_themselves_back(app: Conveyor) -> None:
    """request_stop(): an async handler's ``wait_shutdown()`` returns and a sync handler's
    ``shutdown_requested.wait()`` too, long before ``shutdown_timeout`` (60 s here); both
    snooze, so the jobs go back without using an attempt."""
    seen: dict[str, float] = {}
    running = threading.Barrier(3)

    @app.task
    async def long_async() -> None:
        ctx = current_job()
        assert not ctx.shutting_down
        await asyncio.to_thread(running.wait, 10)
        assert await ctx.wait_shutdown(timeout=30), "no shutdown seen"
        seen["async"] = time.monotonic()
        assert ctx.shutting_down and not ctx.cancelled
        raise Snooze(0)

    @app.task
    def long_sync() -> None:
        ctx = current_job()
        running.wait(10)
        assert ctx.shutdown_requested.wait(timeout=30), "no shutdown seen"
        seen["sync"] = time.monotonic()
        raise Snooze(0)

    async def main() -> None:
        a, s = await long_async.enqueue_async(), await long_sync.enqueue_async()
        worker, task = await start_worker(app, dataclasses.replace(FAST, shutdown_timeout=60))
        await asyncio.to_thread(running.wait, 10)
        asked = time.monotonic()
        worker.request_stop()
        await asyncio.wait_for(task, timeout=15)
        stopped = time.monotonic()
        assert set(seen) == {"async", "sync"}
        assert max(seen.values()) - asked < 2.0, seen
        assert stopped - asked < 10.0, "the worker waited for shutdown_timeout"
        for job in (a, s):
            back = await job_of(app, job.id)
            assert back.state == JobState.AVAILABLE and back.attempt == 0, back
        await app.close_async()

    asyncio.run(main())


def test_wait_shutdown_times_out_and_a_context_outside_a_worker_never_shuts_down() -> None:
    from conveyor._context import ShutdownSignal

    async def main() -> None:
        signal = ShutdownSignal()
        assert await signal.wait_async(timeout=0.01) is False
        waiter = asyncio.ensure_future(signal.wait_async())
        await asyncio.sleep(0)
        threading.Thread(target=signal.set).start()  # set from another thread
        assert await asyncio.wait_for(waiter, 5) is True
        assert signal.wait(0) and await signal.wait_async()

    asyncio.run(main())
    job = Job(id=1, task="t", queue="q", args=[], kwargs={}, priority=0, state=JobState.RUNNING,
              attempt=1, max_attempts=1, scheduled_at=datetime.now(), created_at=datetime.now())
    ctx = JobContext(job)
    assert not ctx.shutting_down and not ctx.shutdown_requested.wait(0.001)
