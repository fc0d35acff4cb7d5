"""Executions started eagerly (Python 3.12+): a handler that does not await runs to its
end inside the producer's loop over its claim. These tests hold on every version: they
fail if that first step ran under the producer's Task or in its context, if a timeout
or a stop reached the wrong Task, or if a job that ended at once upset the producer's
count of running jobs."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import time
from typing import Any

from conveyor import Conveyor, JobState, WorkerConfig, current_job
from conveyor._runtime import Worker

from ._runtime_util import FAST, all_final, in_state, run_worker_until

#: Set by handlers; a value seen by another job means a handler's context leaked.
LEAK: contextvars.ContextVar[int] = contextvars.ContextVar("test_worker_eager_leak")


def test_a_handler_that_does_not_await_runs_under_a_task_of_its_own(app: Conveyor) -> None:
    seen: dict[int, tuple[asyncio.Task[object] | None, int | None, int]] = {}

    @app.task
    async def plain(i: int) -> int:
        seen[i] = (asyncio.current_task(), LEAK.get(None), current_job().id)
        LEAK.set(i)  # stays in this job's context, or leaks into the next one's
        return i

    async def main() -> None:
        jobs = await app.enqueue_many_async([plain.job(i) for i in range(30)])
        worker = await run_worker_until(app, all_final(app))
        tasks = [task for task, _, _ in seen.values()]
        assert len(seen) == 30 and all(task is not None for task in tasks)
        assert len({id(task) for task in tasks}) == 30  # one Task per job, none shared
        assert not set(map(id, tasks)) & set(map(id, worker._claiming))  # not a producer's
        assert [leaked for _, leaked, _ in seen.values()] == [None] * 30
        assert {i: job_id for i, (_, _, job_id) in seen.items()} == {
            i: job.id for i, job in enumerate(jobs)}
        assert LEAK.get(None) is None
        assert worker.completed == 30
        assert all(p.running == 0 for p in worker.producers.values())
        finals = [await app.get_job_async(job.id) for job in jobs]
        assert [f.result for f in finals if f is not None] == list(range(30))
        await app.close_async()

    asyncio.run(main())


def test_the_task_stays_the_same_across_a_suspension(app: Conveyor) -> None:
    identities: list[bool] = []

    @app.task
    async def suspends() -> None:
        before = asyncio.current_task()
        await asyncio.sleep(0)
        identities.append(asyncio.current_task() is before and before is not None)

    async def main() -> None:
        await app.enqueue_many_async([suspends.job() for _ in range(5)])
        await run_worker_until(app, all_final(app))
        await app.close_async()

    asyncio.run(main())
    assert identities == [True] * 5


def test_timeouts_reach_the_job_and_never_the_producer(app: Conveyor) -> None:
    """A timeout entered before the first suspension belongs to the job's Task: under
    the producer's Task it would cancel the claiming loop instead."""

    @app.task
    async def own_timeout() -> str:
        async with asyncio.timeout(5):
            done = True
        try:
            async with asyncio.timeout(0.05):
                await asyncio.Event().wait()
        except TimeoutError:
            return f"timed out {done}"
        return "not timed out"

    @app.task(timeout=0.1, max_attempts=1)
    async def runs_past_its_timeout() -> None:
        current_job()  # starts without suspending
        await asyncio.Event().wait()

    @app.task
    async def after(i: int) -> int:
        return i

    async def main() -> None:
        own = await own_timeout.enqueue_async()
        past = await runs_past_its_timeout.enqueue_async()
        await run_worker_until(app, all_final(app))
        later = [await after.enqueue_async(i) for i in range(3)]  # the producer still claims
        await run_worker_until(app, all_final(app))
        done_own, done_past = await app.get_job_async(own.id), await app.get_job_async(past.id)
        assert done_own is not None and done_own.result == "timed out True"
        assert done_past is not None and done_past.state == JobState.DISCARDED
        assert "ran past its timeout of 0.1s" in done_past.errors[-1]["error"]
        for i, job in enumerate(later):
            final = await app.get_job_async(job.id)
            assert final is not None and final.result == i
        await app.close_async()

    asyncio.run(main())


def test_stops_cancel_a_job_that_started_without_suspending(app: Conveyor) -> None:
    """Cancel and shutdown reach a job whose first step ran inside the claim's loop."""
    started: list[int] = []

    @app.task
    async def settles_in() -> None:
        started.append(current_job().id)  # work before the first await
        await asyncio.sleep(60)

    async def main() -> None:
        cancelled = await settles_in.enqueue_async()

        async def cancel_when_running(_: Worker) -> None:
            deadline = time.monotonic() + 10
            while not await in_state(app, cancelled, JobState.RUNNING)():
                assert time.monotonic() < deadline, "job never started"
                await asyncio.sleep(0.01)
            await app.cancel_job_async(cancelled.id)

        await run_worker_until(app, in_state(app, cancelled, JobState.CANCELLED),
                               during=cancel_when_running)
        given_back = await settles_in.enqueue_async()
        config = dataclasses.replace(FAST, shutdown_timeout=0.2)
        await run_worker_until(app, in_state(app, given_back, JobState.RUNNING), config=config)
        final = await app.get_job_async(given_back.id)
        assert final is not None and final.state == JobState.AVAILABLE and final.attempt == 0
        assert started == [cancelled.id, given_back.id]
        await app.close_async()

    asyncio.run(main())


def test_a_claim_mixing_quick_slow_and_failing_jobs_keeps_the_count(app: Conveyor) -> None:
    """Jobs that end inside the producer's loop give their slot back there; the ones
    that suspend hold theirs; at the end the producer counts nothing running."""

    @app.task(max_attempts=1)
    async def mixed(i: int) -> int:
        if i % 3 == 1:
            await asyncio.sleep(0.01)
        elif i % 3 == 2:
            raise ValueError(i)
        return i

    async def main() -> None:
        jobs = await app.enqueue_many_async([mixed.job(i) for i in range(40)])
        config = dataclasses.replace(FAST, queues={"default": 7})
        worker = await run_worker_until(app, all_final(app), config=config)
        assert worker.completed == 40
        assert [p.running for p in worker.producers.values()] == [0]
        states = [(await app.get_job_async(job.id)) for job in jobs]
        assert [s.state if s else None for s in states] == [
            JobState.DISCARDED if i % 3 == 2 else JobState.COMPLETED for i in range(40)]
        await app.close_async()

    asyncio.run(main())


def test_a_task_factory_set_on_the_loop_makes_the_executions(app: Conveyor) -> None:
    made: list[str] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        made.append(getattr(coro, "__qualname__", ""))
        return asyncio.Task(coro, loop=loop, **kwargs)

    @app.task
    async def plain() -> None:
        pass

    async def main() -> None:
        asyncio.get_running_loop().set_task_factory(factory)
        await plain.enqueue_async()
        await run_worker_until(app, all_final(app), config=WorkerConfig(
            queues={"default": 2}, shutdown_timeout=5.0))
        await app.close_async()

    asyncio.run(main())
    assert "Worker._run_execution" in made
