"""The fence at process level, where only the lease token can refuse a late outcome.

Worker A runs attempt 1 and goes quiet (its heartbeats are half an hour apart, its
node counts as alive for a day). On the virtual clock its lease runs out; worker B rescues the job
and runs attempt 2, which holds a newer lease. Attempt 1 then finishes: the job is
still ``running``, A's node heartbeat is alive and A's own heartbeat never told it the
lease was lost, so nothing but the token tells A's outcome from B's. The late outcome
must be refused and attempt 2's must win. On both backends.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from conveyor import Conveyor, Job, JobState, WorkerConfig, current_job
from conveyor._runtime import Worker
from conveyor.testing import VirtualClock

from .conftest import WaitForAsync

QUIET = WorkerConfig(queues={"default": 1}, lease_ttl=3600.0, heartbeat_interval=1800.0,
                     rescue_interval=1800.0, node_ttl=86_400.0, shutdown_timeout=5.0)
RESCUER = dataclasses.replace(QUIET, lease_ttl=30.0, heartbeat_interval=0.1, rescue_interval=0.1)


async def _job(app: Conveyor, job: Job) -> Job:
    current = await app.get_job_async(job.id)
    assert current is not None
    return current


@pytest.mark.parametrize("outcome", ["return", "raise"])
def test_a_late_outcome_loses_to_the_newer_lease_by_its_token_alone(
        db_url: str, outcome: str, wait_for_async: WaitForAsync) -> None:
    clock = VirtualClock()
    app = Conveyor(db_url, clock=clock)
    release = {1: asyncio.Event(), 2: asyncio.Event()}

    @app.task(max_attempts=5)
    async def hold() -> str:
        attempt = current_job().job.attempt
        await release[attempt].wait()
        if attempt == 1 and outcome == "raise":
            raise RuntimeError("late failure of attempt 1")
        return f"attempt {attempt}"

    async def main() -> None:
        storage = await app.storage()
        stale, fresh = Worker(app.registry, storage, QUIET), Worker(app.registry, storage, RESCUER)
        tasks = []
        try:
            job = await hold.enqueue_async()
            tasks.append(asyncio.create_task(stale.run()))
            first = await wait_for_async(
                lambda: _held(app, job, 1), timeout=20, message="attempt 1 to start on A")
            await clock.advance_async(hours=2)  # A's lease (1 h) ran out; its node did not (1 day)
            tasks.append(asyncio.create_task(fresh.run()))
            second = await wait_for_async(
                lambda: _held(app, job, 2), timeout=20, message="B to rescue and run attempt 2")
            assert first is not None and second is not None
            assert second.lease_token != first.lease_token
            flushes = stale.acker.flushes
            release[1].set()  # attempt 1 finishes now, under a lease it no longer holds
            await wait_for_async(lambda: stale.acker.flushes > flushes, timeout=20,
                                 message="A's late outcome to be written")
            after = await _job(app, job)
            assert after.state is JobState.RUNNING and after.attempt == 2, after
            assert after.lease_token == second.lease_token and after.result is None
            assert len(after.errors) == 1 and "lease expired" in after.errors[0]["error"], (
                f"only the rescue's error, not attempt 1's: {after.errors}")
            release[2].set()
            done = await wait_for_async(lambda: _final(app, job), timeout=20,
                                        message="attempt 2 to complete")
            assert done is not None and done.state is JobState.COMPLETED and done.result == "attempt 2", done
        finally:
            for event in release.values():
                event.set()
            stale.request_stop()
            fresh.request_stop()
            await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)
            await app.close_async()

    asyncio.run(main())


async def _held(app: Conveyor, job: Job, attempt: int) -> Job | None:
    current = await _job(app, job)
    running = current.state is JobState.RUNNING and current.attempt == attempt
    return current if running and current.lease_token is not None else None


async def _final(app: Conveyor, job: Job) -> Job | None:
    current = await _job(app, job)
    return current if current.state is JobState.COMPLETED else None
