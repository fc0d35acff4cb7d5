"""The pruner: deletes old finished jobs, on the leader only, from the hot table and
from history (where the archiver moved them). On PostgreSQL it first drops history's
whole days past the longest retention (``job_history_drop``), then deletes by row what
a shorter retention allows.

A queue may have a retention of its own (``app.set_queue_retention``, live): its jobs
are pruned in a pass of their own, with its ages; every other queue's in one pass with
the worker's ``completed_retention``/``discarded_retention``.

It also forgets idle fair keys (``fair_key_prune``): every claim that serves a key
upserts its row, so a key per tenant or user would otherwise leave a row forever."""

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
        passes = plan_passes(self._params, await self._storage.queue_list())
        # at most 100 batches a pass: the next run goes on
        total = await prune_passes(self._storage, passes, max_batches=100)
        if total:
            log.info("pruned %d finished job(s)", total)
        forgotten = await prune_fair_keys(self._storage, self._params.limit, max_batches=100)
        if forgotten:
            log.info("forgot %d idle fair key(s)", forgotten)
        return total


async def prune_fair_keys(storage: Storage, limit: int, max_batches: int) -> int:
    """Forget idle default-weight fair keys in batches of ``limit`` until one comes back
    short (or ``max_batches``: the next run goes on); how many were forgotten. A batch is
    a short transaction of its own, so claims wait on none for long."""
    total = 0
    for _ in range(max_batches):
        deleted = await storage.fair_key_prune(limit)
        total += deleted
        if deleted < limit:
            break
    return total


async def prune_passes(storage: Storage, passes: list[JobPruneParams],
                       max_batches: int | None = None) -> int:
    """Delete in batches of each pass's ``limit`` until a batch comes back short (or
    ``max_batches`` per pass); how many jobs were deleted. The pruner and
    ``app.prune_now`` both prune through this. History's whole days past the longest
    retention of every pass go first, at once (PostgreSQL drops their partitions)."""
    total = await storage.job_history_drop(longest(passes)) if passes else 0
    for params in passes:
        batches = 0
        while max_batches is None or batches < max_batches:
            deleted = await storage.job_prune(params)
            total += deleted
            batches += 1
            if deleted < params.limit:
                break
    return total


def longest(passes: list[JobPruneParams]) -> JobPruneParams:
    """The longest completed and discarded ages of all passes: a day of history older
    than these is past every queue's retention."""
    return dataclasses.replace(passes[0], completed_age=max(p.completed_age for p in passes),
                               discarded_age=max(p.discarded_age for p in passes))


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
