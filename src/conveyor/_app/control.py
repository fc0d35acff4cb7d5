"""Schedules, live queue control and the cluster view."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .. import _payload
from .._cron import Misfire, Schedule, next_tick
from .._errors import ScheduleNotFoundError
from .._job import Job, JobState
from .._limits import parse_rate
from .._runtime.cron import schedule_insert, upsert_params
from .._storage import (
    FairKeyRow,
    FairWeightSetParams,
    LeaderRow,
    NodeRow,
    QueueUpdateParams,
    ScheduleRow,
    ScheduleSetPausedParams,
)
from .._task import Task
from .._task_retry import parse_queue_backoff
from .composition import CompositionApp
from .jobs import _check_id

if TYPE_CHECKING:
    from .._explain import Explanation


class _Keep:
    """The default of an optional setting: leave it as it is (None resets it)."""

    def __repr__(self) -> str:
        return "<keep>"


KEEP = _Keep()


def _check_retention(which: str, seconds: Any) -> float | None:
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) \
            or not 0 <= seconds <= _payload.MAX_DELAY_SECONDS:
        raise ValueError(f"{which} retention must be seconds >= 0 (or None to reset), "
                         f"got {seconds!r}")
    return float(seconds)


#: A fair key's weight cap: a heavier key would starve the others as one key does.
MAX_FAIR_WEIGHT = 1000.0


def _check_weight(weight: Any) -> float:
    if weight is None:
        return 1.0
    if isinstance(weight, bool) or not isinstance(weight, int | float) \
            or not 0 < weight <= MAX_FAIR_WEIGHT:
        raise ValueError(f"a fair key's weight must be a number > 0 and <= "
                         f"{MAX_FAIR_WEIGHT:g} (or None for 1), got {weight!r}")
    return float(weight)


@dataclasses.dataclass(frozen=True, slots=True)
class QueueInfo:
    """A queue as operators see it: live settings, serving nodes, and exact counts of
    its jobs in every state."""

    name: str
    paused: bool
    concurrency: int | None
    scope: str
    rate_limit: str | None
    nodes: list[str]
    counts: dict[str, int]
    #: Default backoff of the queue's failed jobs ('30', 'exp:5:3600'); None: built-in.
    backoff: str | None = None
    #: Seconds its finished jobs are kept; None: the pruning worker's own setting.
    completed_retention: float | None = None
    discarded_retention: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class ScheduleInfo:
    row: ScheduleRow
    next_run: datetime | None
    defined_in_code: bool


class ControlApp(CompositionApp):
    """Schedules, queue control and the cluster view; see ``Conveyor``."""

    # -- schedules --------------------------------------------------------------------------

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
        await (await self.storage()).schedule_upsert(upsert_params(schedule))

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

    async def trigger_schedule_async(self, name: str, *, source: str = "api") -> Job:
        """Run a schedule's job now, outside its ticks; its enqueue event names
        ``source`` (who asked: ``"api"``, ``"cli"``, ``"dashboard"``, ...)."""
        row = await self._schedule(name)
        insert = schedule_insert(self.tasks, self.config.max_payload_bytes, row, None, None)
        storage = await self.storage_for(source)
        (job,) = await storage.job_insert_many([insert])
        return self._bound([job])[0]

    async def remove_schedule_async(self, name: str) -> None:
        if name in self.schedules:
            raise ValueError(f"schedule {name!r} is defined in code; remove it there")
        if not await (await self.storage()).schedule_delete(name):
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

    async def set_fair_weight_async(self, queue: str, key: str, weight: float | None) -> None:
        """Give a fair key of a queue a weight: it takes ``weight`` turns for another
        key's one (docs/flow-control.md "Fair keys"); ``None`` returns it to 1. A queue
        is known by its name, as for the other queue settings: one with no jobs yet
        takes the weight for when it has some."""
        _payload.check_queue_name(queue)
        _payload.check_fair_key(key, "the fair key")
        await (await self.storage()).fair_weight_set(
            FairWeightSetParams(queue, key, _check_weight(weight)))

    async def list_fair_keys_async(self, queue: str) -> list[FairKeyRow]:
        """A queue's fair keys with waiting jobs (or a weight set), by key: how many
        jobs each has waiting, its weight, and its virtual time (the service it had,
        per unit of weight)."""
        return await (await self.storage()).fair_key_list(_payload.check_queue_name(queue))

    async def set_queue_backoff_async(self, name: str, backoff: str | float | None) -> None:
        """Default backoff of the queue's failed jobs, for tasks that set no ``backoff=``
        of their own (the task's wins). Seconds (``30``) or ``"exp:BASE[:CAP]"``
        (``"exp:5:3600"``: 5 s, 10 s, 20 s ... up to an hour). Running workers use it
        within about ``settings_interval``; ``None`` returns to the built-in backoff."""
        spec = None if backoff is None else parse_queue_backoff(backoff).spec
        await self._queue_update(QueueUpdateParams(name, backoff=spec, set_backoff=True))

    async def set_queue_retention_async(
        self, name: str, *, completed: float | _Keep | None = KEEP,
        discarded: float | _Keep | None = KEEP,
    ) -> None:
        """How long the queue's finished jobs are kept, in seconds: ``completed`` for
        completed and cancelled jobs, ``discarded`` for discarded ones. Overrides the
        pruning worker's ``completed_retention``/``discarded_retention`` for this queue;
        ``None`` returns to them; an argument not given is left as it is."""
        if isinstance(completed, _Keep) and isinstance(discarded, _Keep):
            raise ValueError("give completed= and/or discarded= (seconds, or None to reset)")
        values = {k: _check_retention(k, v) for k, v in
                  (("completed", completed), ("discarded", discarded)) if not isinstance(v, _Keep)}
        await self._queue_update(QueueUpdateParams(
            name, completed_retention=values.get("completed"),
            discarded_retention=values.get("discarded"),
            set_completed_retention="completed" in values,
            set_discarded_retention="discarded" in values,
        ))

    async def list_queues_async(self) -> list[QueueInfo]:
        """Every queue with settings, live nodes or jobs: its settings, the nodes serving
        it, and exact counts of its jobs in every state. Four queries, however many
        queues there are."""
        storage = await self.storage()
        rows = {q.name: q for q in await storage.queue_list()}
        nodes = [n for n in await storage.node_list() if n.alive]
        counts: dict[str, dict[str, int]] = {}
        active = await storage.job_count_by_queue(final_cap=1)
        for c in [*active, *await storage.job_count_final_by_queue()]:
            if c.queue is not None:  # the capped totals (queue None) are not needed here
                counts.setdefault(c.queue, {})[c.state.value] = c.n
        names = sorted(set(rows) | {q for n in nodes for q in n.queues} | set(counts))
        return [QueueInfo(
            name=name, paused=bool(row and row.paused), concurrency=row.concurrency if row else None,
            scope=row.scope if row else "split", rate_limit=row.rate_limit if row else None,
            nodes=[n.id for n in nodes if name in n.queues],
            counts={s.value: counts.get(name, {}).get(s.value, 0) for s in JobState},
            backoff=row.backoff if row else None,
            completed_retention=row.completed_retention if row else None,
            discarded_retention=row.discarded_retention if row else None,
        ) for name in names for row in [rows.get(name)]]

    # -- cluster ------------------------------------------------------------------------------

    async def list_nodes_async(self) -> list[NodeRow]:
        return await (await self.storage()).node_list()

    async def get_leader_async(self) -> LeaderRow | None:
        """The current leader, or None when the role is free or its lease ran out."""
        storage = await self.storage()
        row = await storage.leader_get()
        now = await storage.clock_now()
        return row if row is not None and row.expires_at > now else None

    async def explain_job_async(self, job_id: int) -> Explanation:
        """Say in plain words what holds a job back (or that it is next)."""
        from .._explain import explain

        return await explain(self.tasks, await self.storage(), _check_id(job_id))
