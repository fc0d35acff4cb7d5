"""The pruner: deletes old finished jobs, on the leader only."""

from __future__ import annotations

import logging

from .._storage import JobPruneParams, Storage
from .service import Leadership, Service

log = logging.getLogger("conveyor.cluster")


class Pruner(Service):
    """Deletes old finished jobs in bounded batches, so it never holds long locks."""

    name = "pruner"

    def __init__(self, storage: Storage, leader: Leadership | None, interval: float,
                 completed_age: float, discarded_age: float, batch: int = 1000) -> None:
        self._storage, self._leader = storage, leader
        self.interval = interval
        self._params = JobPruneParams(completed_age, discarded_age, batch)

    async def run_once(self) -> int:
        if self._leader is not None and not self._leader.is_leader:
            return 0
        total = 0
        for _ in range(100):  # at most 100 batches a pass; the next pass goes on
            deleted = await self._storage.job_prune(self._params)
            total += deleted
            if deleted < self._params.limit:
                break
        if total:
            log.info("pruned %d finished job(s)", total)
        return total
