"""The worker's background services: heartbeat, rescuer and stager."""

from __future__ import annotations

import asyncio
import heapq
import json
import logging
import os
import socket
from collections.abc import Callable, Mapping, Sequence

from .._hooks import Hooks, StateChange
from .._job import JobState
from .._storage import (
    JobGetParams,
    JobHeartbeatManyParams,
    JobLease,
    JobRescueExpiredParams,
    JobStageDueParams,
    NodeUpsertParams,
    StagedJob,
    Storage,
)
from ._executor import Execution
from ._service import Service

log = logging.getLogger("conveyor.worker")


class Heartbeat(Service):
    """Keeps this node registered and its leases alive; delivers cancels and lost leases.

    A lease the database no longer grants (rescued elsewhere) stops the local attempt;
    a cancel an operator asked for stops it too.
    """

    name = "heartbeat"

    def __init__(
        self,
        storage: Storage,
        node_id: str,
        queues: Mapping[str, int],
        executions: Callable[[], list[Execution]],
        interval: float,
        lease_ttl: float,
        tasks: Sequence[str] = (),
    ) -> None:
        self._storage = storage
        self._executions = executions
        self.interval = interval
        self._lease_ttl = lease_ttl
        self._node = NodeUpsertParams(
            id=node_id, hostname=socket.gethostname(), pid=os.getpid(),
            queues_json=json.dumps(dict(queues)), tasks_json=json.dumps(sorted(tasks)),
        )

    async def run_once(self) -> tuple[int, int]:
        await self._storage.node_upsert(self._node)
        running = [ex for ex in self._executions() if ex.job.lease_token is not None]
        if not running:
            return 0, 0
        leases = [JobLease(ex.job.id, ex.job.lease_token or 0) for ex in running]
        result = await self._storage.job_heartbeat_many(
            JobHeartbeatManyParams(leases, self._lease_ttl)
        )
        lost = cancelled = 0
        for ex in running:
            if ex.task is None or ex.task.done():
                continue  # finished: its outcome is with the acker, whose write the fence judges
            if ex.job.id not in result.held and ex.stop_reason is None:
                log.warning("lease lost for job %d; stopping it here", ex.job.id,
                            extra=ex.log_extra())
                ex.stop("lost")
                lost += 1
            elif ex.job.id in result.cancel_requested and ex.stop_reason is None:
                log.info("cancel requested for job %d", ex.job.id, extra=ex.log_extra())
                ex.stop("cancel")
                cancelled += 1
        return lost, cancelled


class Rescuer(Service):
    """Returns jobs whose lease expired (their worker died) to the queue."""

    name = "rescuer"

    def __init__(self, storage: Storage, interval: float, node_ttl: float = 15.0,
                 hooks: Hooks | None = None) -> None:
        self._storage = storage
        self.interval = interval
        self._params = JobRescueExpiredParams(node_ttl=node_ttl)
        self._hooks = hooks

    async def run_once(self) -> list[int]:
        ids = await self._storage.job_rescue_expired(self._params)
        if ids:
            log.warning("rescued %d job(s) whose lease expired: %s", len(ids), ids[:20])
        if ids and self._hooks is not None and self._hooks.listeners:
            # Rescues are rare: read the rows back only when someone listens.
            jobs = [await self._storage.job_get(JobGetParams(i)) for i in ids]
            self._hooks.emit_jobs([j for j in jobs if j is not None], JobState.RUNNING, "rescuer")
        return ids


class Stager(Service):
    """Makes scheduled and retryable jobs available once they are due."""

    name = "stager"

    def __init__(self, storage: Storage, interval: float, hooks: Hooks | None = None) -> None:
        self._storage = storage
        self.interval = interval
        self._hooks = hooks
        self._due: list[float] = []
        self._timer: asyncio.TimerHandle | None = None

    async def run_once(self) -> list[StagedJob]:
        staged = await self._storage.job_stage_due(JobStageDueParams())
        if staged and self._hooks is not None and self._hooks.listeners:
            self._hooks.emit(
                StateChange(j.id, j.task, j.queue, j.attempt, JobState.AVAILABLE, j.previous,
                            "stager") for j in staged
            )
        return staged

    def stage_in(self, delay: float) -> None:
        """A job of ours becomes due in ``delay`` seconds (it waited for a rate or a
        concurrency limit): stage it right then, not at the next interval."""
        if delay >= self.interval:
            return
        loop = asyncio.get_running_loop()
        heapq.heappush(self._due, loop.time() + delay + 0.015)  # the ack lands a bit later
        self._arm(loop)

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(self._due[0], self._fire, loop) if self._due else None

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        while self._due and self._due[0] <= loop.time():
            heapq.heappop(self._due)
        self.kick()
        self._arm(loop)
