"""The overview (jobs per state, the last hour, queues, workers), health, schedules and
failure groups: what the dashboard's pages and ``conveyor status`` read, written once.
No web framework here: plain dataclasses in, plain dataclasses out."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import TYPE_CHECKING

from ..._job import ACTIVE_STATES, JobState
from ..._redact import Redactor
from ..._routing import describe, satisfies
from ..._storage import DbHealth, FailureGroup, StateCount
from ..control import ScheduleInfo
from .series import (
    DEFAULT_RANGE,
    Range,
    Series,
    build_series,
    hour_window,
    per_queue,
    window,
)

if TYPE_CHECKING:
    from ..operations import Operations

#: Final states stop being counted here (waiting and running ones are always exact).
FINAL_CAP = 100_000


# -- overview and queues -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class QueueView:
    name: str
    paused: bool
    concurrency: int | None
    scope: str
    rate_limit: str | None
    nodes: list[str]
    #: Sum of the -q/-c limits of the live nodes serving the queue.
    worker_limit: int
    counts: dict[str, int]
    hour_completed: float
    hour_failed: float
    #: The queue's default backoff and retentions (None: built-in / the workers' own).
    backoff: str | None = None
    completed_retention: float | None = None
    discarded_retention: float | None = None
    #: Waiting jobs that require worker labels: (the labels, how many, whether a live
    #: worker of the queue has them).
    requiring: list[tuple[str, int, bool]] = dataclasses.field(default_factory=list)
    #: Fair keys with waiting jobs, most waiting first: (key, waiting jobs, weight).
    fair: list[tuple[str, int, float]] = dataclasses.field(default_factory=list)

    @property
    def requiring_total(self) -> int:
        return sum(n for _, n, _ in self.requiring)

    @property
    def fair_waiting(self) -> int:
        return sum(n for _, n, _ in self.fair)


#: Why the per-minute figures are missing when no metric was ever recorded.
NO_METRICS = ("no worker has reported metrics yet (workers started with "
              "metrics_retention 0 never do)")


@dataclasses.dataclass(frozen=True, slots=True)
class Overview:
    #: state -> (count, capped): waiting and running states exact, final ones capped.
    states: dict[str, tuple[int, bool]]
    series: Series
    queues: list[QueueView]
    workers_alive: int
    #: Why the last hour's figures are unknown (None: they are known, zeros included).
    metrics_missing: str | None = None

    @property
    def finished(self) -> dict[str, tuple[int, bool]]:
        """What the job table knows when the rollups do not: jobs per final state."""
        return {s: self.states[s] for s in ("completed", "discarded", "cancelled")}


async def state_counts(ops: Operations) -> list[StateCount]:
    return await ops.count_by_queue(FINAL_CAP)


def totals(counts: list[StateCount]) -> dict[str, tuple[int, bool]]:
    out: dict[str, tuple[int, bool]] = {s.value: (0, False) for s in JobState}
    for c in counts:
        n, capped = out[c.state.value]
        out[c.state.value] = (n + c.n, capped or c.capped)
    return out


async def queues(ops: Operations, counts: list[StateCount] | None = None) -> list[QueueView]:
    counts = counts if counts is not None else await state_counts(ops)
    rows = {q.name: q for q in await ops.queue_rows()}
    nodes = await ops.alive_nodes()
    hour = per_queue(await ops.metric_series(hour_window()[0]))
    requiring: dict[str, list[tuple[str, int, bool]]] = {}
    for r in await ops.requiring():
        runnable = any(r.queue in n.queues and satisfies(n.labels, r.requires) for n in nodes)
        requiring.setdefault(r.queue, []).append((describe(r.requires), r.n, runnable))
    by_queue: dict[str, dict[str, int]] = {}
    for c in counts:
        if c.queue is not None:
            by_queue.setdefault(c.queue, {})[c.state.value] = c.n
    names = sorted(set(rows) | set(by_queue) | {q for n in nodes for q in n.queues} | set(hour))
    out = []
    for name in names:
        fair = [(k.key, k.waiting, k.weight) for k in await ops.fair_keys(name) if k.waiting
                ] if by_queue.get(name, {}).get("available") else []
        row = rows.get(name)
        serving = [n for n in nodes if name in n.queues]
        metrics = hour.get(name, {})
        out.append(QueueView(
            name=name, paused=bool(row and row.paused), concurrency=row.concurrency if row else None,
            scope=row.scope if row else "split", rate_limit=row.rate_limit if row else None,
            nodes=[n.id for n in serving], worker_limit=sum(n.queues[name] for n in serving),
            counts={s.value: by_queue.get(name, {}).get(s.value, 0) for s in ACTIVE_STATES},
            hour_completed=metrics.get("completed", 0.0),
            hour_failed=metrics.get("retried", 0.0) + metrics.get("discarded", 0.0),
            backoff=row.backoff if row else None,
            completed_retention=row.completed_retention if row else None,
            discarded_retention=row.discarded_retention if row else None,
            requiring=requiring.get(name, []),
            fair=sorted(fair, key=lambda f: (-f[1], f[0])),
        ))
    return out


async def series(ops: Operations, rng: Range = DEFAULT_RANGE, *, queue: str | None = None,
                 task: str | None = None) -> Series:
    """The charts' series over ``rng`` for the cluster, one queue or one task: two
    queries whose rows are summed per point in SQL (at most ``rng.points`` points per
    series, whatever the range). A task has no depth samples (they are per queue)."""
    points = window(rng)
    metrics = await ops.metric_series(points[0], queue=queue, task=task, step=rng.step,
                                      merged=True)
    depth = ([] if task is not None
             else await ops.depth_series(points[0], queue=queue or "*", step=rng.step))
    return build_series(metrics, depth, points, depth_queue=queue or "*")


async def overview(ops: Operations, rng: Range = DEFAULT_RANGE) -> Overview:
    counts = await state_counts(ops)
    series_ = await series(ops, rng)
    alive = len(await ops.alive_nodes())
    missing = None if await ops.metric_totals() else NO_METRICS
    return Overview(totals(counts), series_, await queues(ops, counts), alive, missing)


async def failure_groups(ops: Operations, queue: str | None, task: str | None,
                         redact: Redactor) -> list[FailureGroup]:
    """The groups, each error text as the redactor shows its last job's error (a secret
    the task's code echoed into its message is erased)."""
    return [await _shown_group(ops, group, redact)
            for group in await ops.failure_groups(queue, task)]


async def _shown_group(ops: Operations, group: FailureGroup, redact: Redactor) -> FailureGroup:
    job = await ops.get_job(group.last_id)
    if job is None:
        return group
    shown = redact(dataclasses.replace(job, errors=[{"error": group.error}]))
    text = shown.errors[-1].get("error") if shown.errors else None
    return group if text == group.error else dataclasses.replace(group, error=str(text))


# -- schedules, workers, health, metrics --------------------------------------------------------


async def schedules(ops: Operations) -> list[ScheduleInfo]:
    return await ops.app.list_schedules_async()


@dataclasses.dataclass(frozen=True, slots=True)
class NodeView:
    id: str
    hostname: str
    pid: int
    queues: dict[str, int]
    started_at: datetime
    heartbeat_age: float
    alive: bool
    running: int
    leader: bool
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    version: str | None = None
    #: The tasks it claims (``--tasks``); None: every task.
    serves: list[str] | None = None


async def workers(ops: Operations) -> list[NodeView]:
    nodes = await ops.nodes()
    running = await ops.running_by_node()
    leader = await ops.leader()
    now = await ops.clock_now()
    return [NodeView(n.id, n.hostname, n.pid, n.queues, n.started_at,
                     max((now - n.heartbeat_at).total_seconds(), 0.0), n.alive,
                     running.get(n.id, 0), leader is not None and leader.node_id == n.id,
                     n.labels, n.version, n.serves)
            for n in nodes]


async def health(ops: Operations, timeout: float = 3.0) -> DbHealth:
    return await ops.health(timeout)
