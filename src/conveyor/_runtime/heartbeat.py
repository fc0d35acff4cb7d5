"""The heartbeat: keeps this node registered and its leases alive."""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Callable, Mapping, Sequence

from .._storage import JobHeartbeatManyParams, JobLease, NodeUpsertParams, Storage
from .executor import Execution
from .service import Service

log = logging.getLogger("conveyor.worker")


class Heartbeat(Service):
    """Keeps this node registered and its leases alive; delivers cancels and lost leases.

    A lease the database no longer grants (rescued elsewhere) stops the local attempt;
    a cancel an operator asked for stops it too.
    """

    name = "heartbeat"
    runs_at_start = True

    def __init__(
        self,
        storage: Storage,
        node_id: str,
        queues: Mapping[str, int],
        executions: Callable[[], list[Execution]],
        interval: float,
        lease_ttl: float,
        tasks: Sequence[str] = (),
        *,
        node_ttl: float,
        labels: Mapping[str, str] | None = None,
        version: str | None = None,
        serves: Sequence[str] | None = None,
    ) -> None:
        self._storage = storage
        self._executions = executions
        self.interval = interval
        self._lease_ttl = lease_ttl
        self._node = NodeUpsertParams(
            id=node_id, hostname=socket.gethostname(), pid=os.getpid(),
            queues_json=json.dumps(dict(queues)), tasks_json=json.dumps(sorted(tasks)),
            labels_json=json.dumps(dict(labels or {}), sort_keys=True), version=version,
            ttl=node_ttl, serves_json=None if serves is None else json.dumps(sorted(serves)),
        )
        self.node_ttl = node_ttl

    async def stop(self) -> None:
        await self._storage.node_delete(self._node.id)

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
