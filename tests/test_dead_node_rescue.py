"""A dead node's jobs are rescued by the node-death rule, before their leases run out.

Worker A claims a job with a one-hour lease, then its node stops heartbeating (its
beats are half an hour apart; it counts as dead after a minute of silence). On the
virtual clock five minutes pass: A's lease is still valid for 55 minutes, so only the
rule "its node stopped heartbeating" can return the job. Worker B must rescue it and
run attempt 2 at once. Both backends (the rescuer's SQL is each dialect's).
"""

from __future__ import annotations

import asyncio
import dataclasses

from conveyor import Conveyor, Job, JobState, WorkerConfig, current_job
from conveyor._runtime import Worker
from conveyor.testing import VirtualClock

from .conftest import WaitForAsync

SILENT = WorkerConfig(queues={"default": 1}, lease_ttl=3600.0, heartbeat_interval=1800.0,
                      rescue_interval=1800.0, node_ttl=60.0, shutdown_timeout=5.0)
RESCUER = dataclasses.replace(SILENT, heartbeat_interval=0.1, rescue_interval=0.1)


async def _attempt(app: Conveyor, job: Job, attempt: int) -> Job | None:
    current = await app.get_job_async(job.id)
    assert current is not None
    running = current.state is JobState.RUNNING and current.attempt == attempt
    return current if running and current.lease_owner else None


def test_a_silent_nodes_job_is_rescued_while_its_lease_is_valid(
        db_url: str, wait_for_async: WaitForAsync) -> None:
    clock = VirtualClock()
    app = Conveyor(db_url, clock=clock)
    release = {1: asyncio.Event(), 2: asyncio.Event()}

    @app.task(max_attempts=5)
    async def hold() -> int:
        attempt = current_job().job.attempt
        await release[attempt].wait()
        return attempt

    async def main() -> None:
        storage = await app.storage()
        silent, rescuer = (Worker(app.registry, storage, SILENT),
                           Worker(app.registry, storage, RESCUER))
        tasks = []
        try:
            job = await hold.enqueue_async()
            tasks.append(asyncio.create_task(silent.run()))
            first = await wait_for_async(lambda: _attempt(app, job, 1), timeout=20,
                                         message="attempt 1 to start on the silent node")
            assert first is not None and first.lease_owner == silent.node_id
            assert first.lease_expires_at is not None
            now = await clock.advance_async(minutes=5)  # past the node's ttl, not the lease
            assert now < first.lease_expires_at
            tasks.append(asyncio.create_task(rescuer.run()))
            second = await wait_for_async(
                lambda: _attempt(app, job, 2), timeout=20,
                message="the rescuer to return the dead node's job and run attempt 2")
            assert second is not None and second.lease_owner == rescuer.node_id
            (rescue,) = second.errors
            assert rescue["node"] == silent.node_id and rescue["attempt"] == 1, rescue
            assert clock.now() < first.lease_expires_at, "rescued by lease expiry instead"
        finally:
            for event in release.values():
                event.set()
            silent.request_stop()
            rescuer.request_stop()
            await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)
            await app.close_async()

    asyncio.run(main())
