"""The pruner: deletes old finished jobs, on the leader only.

A queue may have a retention of its own (``app.set_queue_retention``, live): its jobs
are pruned in a pass of their own, with its ages; every other queue's in one pass with
the worker's ``completed_retention``/``discarded_retention``."""

from __future__ import annotations

import dataclasses
import logging

from .._storage import JobPruneParams, QueueRow, Storage
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
        for params in plan_passes(self._params, await self._storage.queue_list()):
            for _ in range(100):  # at most 100 batches a pass; the next pass goes on
                deleted = await self._storage.job_prune(params)
                total += deleted
                if deleted < params.limit:
                    break
        if total:
            log.info("pruned %d finished job(s)", total)
        return total


def plan_passes(default: JobPruneParams, queues: list[QueueRow]) -> list[JobPruneParams]:
    """One pass per queue with a retention of its own (the other age from ``default``),
    then one for every other queue with ``default``'s ages."""
    own = [q for q in queues
           if q.completed_retention is not None or q.discarded_retention is not None]
    passes = [dataclasses.replace(
        default, queue=q.name,
        completed_age=default.completed_age if q.completed_retention is None
        else q.completed_retention,
        discarded_age=default.discarded_age if q.discarded_retention is None
        else q.discarded_retention,
    ) for q in own]
    return [*passes, dataclasses.replace(default, exclude_queues=tuple(q.name for q in own))]
