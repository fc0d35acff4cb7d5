"""The flow-control half of the app API: schedules, live queue control, cluster view.

Mixed into ``Conveyor``; as everywhere, the sync methods are one-line bridges to the
async ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from . import _payload
from ._config import ConveyorConfig
from ._cron import Misfire, Schedule, next_tick
from ._errors import ConveyorError
from ._explain import Explanation, explain
from ._job import Job
from ._limits import parse_rate
from ._storage import (
    JobCountByStateParams,
    JobInsertManyParams,
    LeaderGetParams,
    LeaderRow,
    NodeListParams,
    NodeRow,
    QueueUpdateParams,
    ScheduleDeleteParams,
    ScheduleRow,
    ScheduleSetPausedParams,
    ScheduleUpsertParams,
    Storage,
)

if TYPE_CHECKING:
    from ._task import Task

T = TypeVar("T")
NODE_TTL = 15.0


class ScheduleNotFoundError(ConveyorError, LookupError):
    """No schedule has the given name."""


@dataclasses.dataclass(frozen=True, slots=True)
class QueueInfo:
    """A queue as operators see it: live settings, serving nodes, jobs per state."""

    name: str
    paused: bool
    concurrency: int | None
    scope: str
    rate_limit: str | None
    nodes: list[str]
    counts: dict[str, int]


@dataclasses.dataclass(frozen=True, slots=True)
class ScheduleInfo:
    row: ScheduleRow
    next_run: datetime | None
    defined_in_code: bool


class FlowControl:
    """Schedules, queue control and the cluster view; see ``Conveyor``."""

    schedules: dict[str, Schedule]
    tasks: dict[str, Task[Any, Any]]
    config: ConveyorConfig

    async def storage(self) -> Storage:
        raise NotImplementedError

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        raise NotImplementedError

    task: Callable[..., Any]

    # -- schedules --------------------------------------------------------------------------

    def periodic(
        self, *, cron: str, timezone: str = "UTC", misfire: Misfire = "run_once",
        backfill: int | None = None, name: str | None = None, args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None, **task_options: Any,
    ) -> Callable[[Callable[..., Any]], Task[Any, Any]]:
        """Register a task that runs at every tick of ``cron`` in ``timezone``.

        Example: ``@app.periodic(cron="*/5 * * * *", timezone="Europe/Paris")``
        """

        def register(fn: Callable[..., Any]) -> Task[Any, Any]:
            task: Task[Any, Any] = self.task(**task_options)(fn)
            schedule = Schedule(
                name=_payload.check_task_name(name or task.name), task=task.name, cron=cron,
                timezone=timezone, args=tuple(args), kwargs=dict(kwargs or {}),
                misfire="backfill" if backfill else misfire, backfill=backfill or 0,
            )
            task.check_arguments(schedule.args, schedule.kwargs)
            if schedule.name in self.schedules:
                raise ValueError(f"schedule {schedule.name!r} is already defined")
            self.schedules[schedule.name] = schedule
            return task

        return register

    async def declare_schedules(self, storage: Storage) -> None:
        """Write the schedules defined in code (every worker does it at start)."""
        for schedule in self.schedules.values():
            await storage.schedule_upsert(_upsert_params(schedule))

    async def add_schedule_async(
        self, name: str, *, cron: str, task: Task[Any, Any] | str, args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None, timezone: str = "UTC",
        misfire: Misfire = "run_once", backfill: int = 0, queue: str | None = None,
        priority: int | None = None,
    ) -> None:
        """Define (or redefine) a schedule at runtime; it lives in the database."""
        task_name = task if isinstance(task, str) else task.name
        schedule = Schedule(
            name=_payload.check_task_name(name), task=_payload.check_task_name(task_name),
            cron=cron, timezone=timezone, args=tuple(args), kwargs=dict(kwargs or {}),
            queue=_payload.check_queue_name(queue) if queue is not None else None,
            priority=_payload.check_priority(priority) if priority is not None else None,
            misfire="backfill" if backfill else misfire, backfill=backfill,
        )
        if not isinstance(task, str):
            task.check_arguments(schedule.args, schedule.kwargs)
        await (await self.storage()).schedule_upsert(_upsert_params(schedule))

    async def list_schedules_async(self) -> list[ScheduleInfo]:
        storage = await self.storage()
        now = await storage.clock_now()
        return [
            ScheduleInfo(row, None if row.paused else next_tick(row.cron, row.timezone, now),
                         row.name in self.schedules)
            for row in await storage.schedule_list()
        ]

    async def _schedule(self, name: str) -> ScheduleRow:
        for row in await (await self.storage()).schedule_list():
            if row.name == name:
                return row
        raise ScheduleNotFoundError(f"no schedule named {name!r}")

    async def pause_schedule_async(self, name: str) -> None:
        if not await (await self.storage()).schedule_set_paused(ScheduleSetPausedParams(name, True)):
            raise ScheduleNotFoundError(f"no schedule named {name!r}")

    async def resume_schedule_async(self, name: str) -> None:
        if not await (await self.storage()).schedule_set_paused(ScheduleSetPausedParams(name, False)):
            raise ScheduleNotFoundError(f"no schedule named {name!r}")

    async def trigger_schedule_async(self, name: str) -> Job:
        """Run a schedule's job now, outside its ticks."""
        from ._runtime._flow import schedule_insert

        row = await self._schedule(name)
        insert = schedule_insert(self.tasks, self.config.max_payload_bytes, row, None, None)
        (job,) = await (await self.storage()).job_insert_many(JobInsertManyParams([insert]))
        return job

    async def remove_schedule_async(self, name: str) -> None:
        if name in self.schedules:
            raise ValueError(f"schedule {name!r} is defined in code; remove it there")
        if not await (await self.storage()).schedule_delete(ScheduleDeleteParams(name)):
            raise ScheduleNotFoundError(f"no schedule named {name!r}")

    # -- queues -------------------------------------------------------------------------------

    async def _queue_update(self, params: QueueUpdateParams) -> None:
        _payload.check_queue_name(params.name)
        await (await self.storage()).queue_update(params)

    async def pause_queue_async(self, name: str) -> None:
        """Stop every worker from starting jobs of this queue (within about a second)."""
        await self._queue_update(QueueUpdateParams(name, paused=True, set_paused=True))

    async def resume_queue_async(self, name: str) -> None:
        await self._queue_update(QueueUpdateParams(name, paused=False, set_paused=True))

    async def set_queue_concurrency_async(
        self, name: str, concurrency: int | None, *, per_node: bool = False
    ) -> None:
        """Cap a queue's running jobs. By default the number is the cluster total, split
        fairly across the live nodes serving the queue; ``per_node=True`` applies it on
        every node. ``None`` returns to each worker's own -q/-c setting."""
        if concurrency is not None and (
            isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
        ):
            raise ValueError("concurrency must be an int >= 1 (or None to reset)")
        scope = "per_node" if per_node else "split"
        await self._queue_update(QueueUpdateParams(name, concurrency=concurrency, scope=scope,
                                                   set_concurrency=True))

    async def set_queue_rate_limit_async(self, name: str, rate: str | None) -> None:
        """Limit how often jobs of a queue start, cluster-wide (e.g. "100/m")."""
        if rate is not None:
            parse_rate(rate)
        await self._queue_update(QueueUpdateParams(name, rate_limit=rate, set_rate_limit=True))

    async def list_queues_async(self) -> list[QueueInfo]:
        storage = await self.storage()
        rows = {q.name: q for q in await storage.queue_list()}
        nodes = [n for n in await storage.node_list(NodeListParams(NODE_TTL)) if n.alive]
        names = sorted(set(rows) | {q for n in nodes for q in n.queues})
        out = []
        for name in names:
            row = rows.get(name)
            counts = await storage.job_count_by_state(JobCountByStateParams(name))
            out.append(QueueInfo(
                name=name, paused=bool(row and row.paused), concurrency=row.concurrency if row else None,
                scope=row.scope if row else "split", rate_limit=row.rate_limit if row else None,
                nodes=[n.id for n in nodes if name in n.queues], counts=counts,
            ))
        return out

    # -- cluster ------------------------------------------------------------------------------

    async def list_nodes_async(self) -> list[NodeRow]:
        return await (await self.storage()).node_list(NodeListParams(NODE_TTL))

    async def get_leader_async(self) -> LeaderRow | None:
        """The current leader, or None when the role is free or its lease ran out."""
        storage = await self.storage()
        row = await storage.leader_get(LeaderGetParams())
        now = await storage.clock_now()
        return row if row is not None and row.expires_at > now else None

    async def explain_job_async(self, job_id: int) -> Explanation:
        """Say in plain words what holds a job back (or that it is next)."""
        return await explain(self, await self.storage(), job_id)

    # -- sync twins ---------------------------------------------------------------------------

    def add_schedule(self, name: str, **kwargs: Any) -> None:
        """Example: ``app.add_schedule("cleanup", cron="0 3 * * *", task=cleanup)``"""
        self._sync(self.add_schedule_async(name, **kwargs))

    def list_schedules(self) -> list[ScheduleInfo]:
        return self._sync(self.list_schedules_async())

    def pause_schedule(self, name: str) -> None:
        self._sync(self.pause_schedule_async(name))

    def resume_schedule(self, name: str) -> None:
        self._sync(self.resume_schedule_async(name))

    def trigger_schedule(self, name: str) -> Job:
        return self._sync(self.trigger_schedule_async(name))

    def remove_schedule(self, name: str) -> None:
        self._sync(self.remove_schedule_async(name))

    def pause_queue(self, name: str) -> None:
        """Example: ``app.pause_queue("mail")``"""
        self._sync(self.pause_queue_async(name))

    def resume_queue(self, name: str) -> None:
        self._sync(self.resume_queue_async(name))

    def set_queue_concurrency(self, name: str, concurrency: int | None, *,
                              per_node: bool = False) -> None:
        """Example: ``app.set_queue_concurrency("mail", 20)``"""
        self._sync(self.set_queue_concurrency_async(name, concurrency, per_node=per_node))

    def set_queue_rate_limit(self, name: str, rate: str | None) -> None:
        self._sync(self.set_queue_rate_limit_async(name, rate))

    def list_queues(self) -> list[QueueInfo]:
        return self._sync(self.list_queues_async())

    def list_nodes(self) -> list[NodeRow]:
        return self._sync(self.list_nodes_async())

    def get_leader(self) -> LeaderRow | None:
        return self._sync(self.get_leader_async())

    def explain_job(self, job_id: int) -> Explanation:
        """Example: ``print(app.explain_job(42))``"""
        return self._sync(self.explain_job_async(job_id))


def _upsert_params(schedule: Schedule) -> ScheduleUpsertParams:
    return ScheduleUpsertParams(
        name=schedule.name, task=schedule.task, cron=schedule.cron, timezone=schedule.timezone,
        args_json=_payload.dumps(list(schedule.args)), kwargs_json=_payload.dumps(dict(schedule.kwargs)),
        queue=schedule.queue, priority=schedule.priority, misfire=schedule.misfire,
        backfill=schedule.backfill,
    )
