"""The cron scheduler: one job per (schedule, tick), enqueued by the leader.

Its writes stay safe even if two nodes briefly both think they lead: the unique key
of a tick makes a second insert return the first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from .. import _payload
from .._cron import Schedule, ticks_to_run
from .._job import Job, JobState
from .._registry import Registry
from .._storage import (
    JobInsert,
    ScheduleAdvanceParams,
    ScheduleRow,
    ScheduleUpsertParams,
    Storage,
)
from .._task import JobSpec, Task
from .._task_options import EnqueueOptions
from .service import Leadership, Service

ALL_STATES = "," + ",".join(s.value for s in JobState) + ","


class CronScheduler(Service):
    """Enqueues one job per (schedule, tick); the unique key makes a second insert of
    the same tick return the first, whoever runs it."""

    name = "cron"

    def __init__(self, registry: Registry, storage: Storage, leader: Leadership | None,
                 interval: float = 1.0, grace: float = 30.0) -> None:
        self._registry, self._storage, self._leader = registry, storage, leader
        self.interval, self.grace = interval, grace

    async def start(self) -> None:
        """Write the schedules defined in code (every worker does it at start)."""
        await declare_schedules(self._registry.schedules.values(), self._storage)

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
                inserts = [self._insert(row, tick.isoformat(), int(tick.timestamp()))
                           for tick in ticks]
                jobs = await self._storage.job_insert_many(inserts)
                created += [j for j in jobs if not j.duplicate]
            await self._storage.schedule_advance(
                ScheduleAdvanceParams(row.name, newest, jobs[-1].id if jobs else None))
        return created

    def _insert(self, row: ScheduleRow, tick: str | None, epoch: int | None) -> JobInsert:
        return schedule_insert(self._registry.tasks, self._registry.config.max_payload_bytes,
                               row, tick, epoch)


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


async def declare_schedules(schedules: Iterable[Schedule], storage: Storage) -> None:
    """Write schedules defined in code; their runtime state (last tick, paused) stays."""
    for schedule in schedules:
        await storage.schedule_upsert(upsert_params(schedule))


def upsert_params(schedule: Schedule) -> ScheduleUpsertParams:
    return ScheduleUpsertParams(
        name=schedule.name, task=schedule.task, cron=schedule.cron, timezone=schedule.timezone,
        args_json=_payload.dumps(list(schedule.args)),
        kwargs_json=_payload.dumps(dict(schedule.kwargs)),
        queue=schedule.queue, priority=schedule.priority, misfire=schedule.misfire,
        backfill=schedule.backfill,
    )
