"""Cluster services: leader election, the cron scheduler, the pruner, and live queue
settings. The scheduler and pruner act only while this node is the leader; their
writes stay safe even if two nodes briefly both think they lead (unique ticks,
bounded deletes)."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import _payload
from .._cron import ticks_to_run
from .._job import Job, JobState
from .._limits import RateLimit
from .._storage import (
    JobInsert,
    JobInsertManyParams,
    JobPruneParams,
    LeaderElectParams,
    LeaderResignParams,
    NodeListParams,
    QueueRow,
    ScheduleAdvanceParams,
    ScheduleRow,
    Storage,
)
from .._task import EnqueueOptions, JobSpec
from ._producer import Producer
from ._service import Service

if TYPE_CHECKING:
    from .._app import Conveyor
    from .._task import Task

log = logging.getLogger("conveyor.cluster")
ALL_STATES = "," + ",".join(s.value for s in JobState) + ","


class LeaderElector(Service):
    """Holds the leader lease while it can renew it; a dead leader's lease simply
    expires and the next node to ask takes it with a higher term."""

    name = "leader"

    def __init__(self, storage: Storage, node_id: str, ttl: float) -> None:
        self._storage, self.node_id, self.ttl = storage, node_id, ttl
        self.interval = ttl / 3
        self.term = 0
        self._valid_until = 0.0

    @property
    def is_leader(self) -> bool:
        # Stop acting a little before the lease could have passed to someone else.
        return time.monotonic() < self._valid_until - self.interval / 2

    async def run_once(self) -> bool:
        asked = time.monotonic()
        row = await self._storage.leader_elect(LeaderElectParams(self.node_id, self.ttl))
        was = self.is_leader
        if row is not None and row.node_id == self.node_id:
            self._valid_until, self.term = asked + self.ttl, row.term
            if not was:
                log.info("this node is now the leader (term %d)", row.term)
        else:
            self._valid_until = 0.0
            if was:
                log.warning("leadership lost to %s", row.node_id if row else "nobody")
        return self.is_leader

    async def resign(self) -> None:
        self._valid_until = 0.0
        await self._storage.leader_resign(LeaderResignParams(self.node_id))


class CronScheduler(Service):
    """Enqueues one job per (schedule, tick); the unique key makes a second insert of
    the same tick return the first, whoever runs it."""

    name = "cron"

    def __init__(self, app: Conveyor, storage: Storage, leader: LeaderElector | None,
                 interval: float = 1.0, grace: float = 30.0) -> None:
        self._app, self._storage, self._leader = app, storage, leader
        self.interval, self.grace = interval, grace

    async def run_once(self) -> list[Job]:
        if self._leader is not None and not self._leader.is_leader:
            return []
        now = await self._storage.clock_now()
        created: list[Job] = []
        for row in await self._storage.schedule_list():
            if row.paused:
                continue
            ticks, newest = ticks_to_run(row.cron, row.timezone, row.misfire, row.backfill,
                                         row.last_tick or row.created_at, now, self.grace)
            if newest is None:
                continue
            jobs = []
            if ticks:
                params = JobInsertManyParams([self._insert(row, tick.isoformat(),
                                                           int(tick.timestamp())) for tick in ticks])
                jobs = await self._storage.job_insert_many(params)
                created += [j for j in jobs if not j.duplicate]
            await self._storage.schedule_advance(
                ScheduleAdvanceParams(row.name, newest, jobs[-1].id if jobs else None))
        return created

    def _insert(self, row: ScheduleRow, tick: str | None, epoch: int | None) -> JobInsert:
        return schedule_insert(self._app.tasks, self._app.config.max_payload_bytes, row, tick, epoch)


def schedule_insert(tasks: Mapping[str, Task[Any, Any]], cap: int, row: ScheduleRow,
                    tick: str | None, epoch: int | None) -> JobInsert:
    """The job of one tick, unique per (schedule, tick); or of a manual run (no tick)."""
    meta = {"schedule": row.name, "tick": tick}
    task = tasks.get(row.task)
    if task is not None:
        opts = EnqueueOptions(queue=row.queue, priority=row.priority, meta=meta)
        insert = JobSpec(task, tuple(row.args), dict(row.kwargs), opts).to_insert(cap)
    else:  # defined at runtime for a task this process does not know: still enqueue it
        args_json, kwargs_json = _payload.encode_arguments(row.task, row.args, row.kwargs, cap)
        insert = JobInsert(task=row.task, queue=row.queue or "default", args_json=args_json,
                           kwargs_json=kwargs_json, priority=row.priority or 0,
                           max_attempts=20, tags_json="[]", meta_json=_payload.dumps(meta))
    if epoch is None:
        return insert
    return dataclasses.replace(insert, unique_key=f"cron:{row.name}:{epoch}",
                               unique_states=ALL_STATES)


class Pruner(Service):
    """Deletes old finished jobs in bounded batches, so it never holds long locks."""

    name = "pruner"

    def __init__(self, storage: Storage, leader: LeaderElector | None, interval: float,
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


class QueueSettings(Service):
    """Applies queue settings from the database (pause, concurrency, rate limit) to this
    node's producers, within about one interval of a change."""

    name = "queue-settings"

    def __init__(self, storage: Storage, node_id: str, producers: Mapping[str, Producer],
                 interval: float, node_ttl: float) -> None:
        self._storage, self._node_id, self._producers = storage, node_id, producers
        self.interval, self._node_ttl = interval, node_ttl

    async def run_once(self) -> dict[str, int]:
        rows = {q.name: q for q in await self._storage.queue_list()}
        serving: dict[str, list[str]] | None = None
        limits: dict[str, int] = {}
        for name, producer in self._producers.items():
            row = rows.get(name)
            limit = producer.configured_limit
            if row is not None and row.concurrency is not None:
                if row.scope == "per_node":
                    limit = row.concurrency
                else:
                    serving = serving or await self._serving()
                    limit = fair_share(row, serving.get(name, []), self._node_id)
            rate = RateLimit(row.rate_limit) if row is not None and row.rate_limit else None
            producer.apply(paused=bool(row and row.paused), limit=limit, rate_limit=rate)
            limits[name] = limit
        return limits

    async def _serving(self) -> dict[str, list[str]]:
        nodes = await self._storage.node_list(NodeListParams(self._node_ttl))
        out: dict[str, list[str]] = {}
        for node in nodes:
            if node.alive:
                for queue in node.queues:
                    out.setdefault(queue, []).append(node.id)
        return out


def fair_share(row: QueueRow, nodes: list[str], node_id: str) -> int:
    """Split a queue's total concurrency across the live nodes serving it: every node
    gets the floor, the first ones (by id) one more for the remainder."""
    total = row.concurrency or 0
    members = sorted(set(nodes) | {node_id})
    base, extra = divmod(total, len(members))
    return base + (1 if members.index(node_id) < extra else 0)
