"""What each dashboard page (and ``conveyor status``) shows, read through the operator
API (``Operations``). No web framework here: plain dataclasses in, plain dataclasses out."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .._app import ScheduleInfo
from .._errors import JobNotFoundError
from .._job import ACTIVE_STATES, DISCARDABLE_FROM, RETRYABLE_FROM, Job, JobState
from .._payload_crypt import sealed_key
from .._storage import (
    DbHealth,
    FailureGroup,
    JobFilter,
    StateCount,
)
from ..contrib import prometheus as _prometheus
from ._redact import Redactor
from ._series import Series, build_series, hour_window, per_queue

if TYPE_CHECKING:
    from .._operations import Operations

#: Characters of args shown in a list row; the detail page shows them all.
PREVIEW_CHARS = 120
FINAL_CAP = 100_000
#: A search in args reads at most the newest this many jobs (it cannot use an index).
TEXT_SCAN = 100_000


def preview(value: Any, limit: int = PREVIEW_CHARS) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def arguments_preview(job: Job) -> str:
    """A list row's args; sealed ones (``encrypt=True``) are named, never decrypted."""
    key = sealed_key(job.args, job.kwargs)
    return preview([job.args, job.kwargs]) if key is None else f"🔒 encrypted (key {key})"


def first_line(text: str, limit: int = 160) -> str:
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def last_error(job: Job) -> str:
    return first_line(str(job.errors[-1].get("error", ""))) if job.errors else ""


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
    by_queue: dict[str, dict[str, int]] = {}
    for c in counts:
        if c.queue is not None:
            by_queue.setdefault(c.queue, {})[c.state.value] = c.n
    names = sorted(set(rows) | set(by_queue) | {q for n in nodes for q in n.queues} | set(hour))
    out = []
    for name in names:
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
        ))
    return out


async def overview(ops: Operations) -> Overview:
    counts = await state_counts(ops)
    minutes = hour_window()
    series = build_series(await ops.metric_series(minutes[0]),
                          await ops.depth_series(minutes[0]), minutes)
    alive = len(await ops.alive_nodes())
    missing = None if await ops.metric_totals() else NO_METRICS
    return Overview(totals(counts), series, await queues(ops, counts), alive, missing)


# -- jobs ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class JobRow:
    job: Job
    args: str
    error: str


@dataclasses.dataclass(frozen=True, slots=True)
class JobsPage:
    rows: list[JobRow]
    count: int
    capped: bool
    #: Keyset cursors: ``after`` for the newer page, ``before`` for the older one.
    newer: int | None
    older: int | None


async def bounded(ops: Operations, flt: JobFilter) -> JobFilter:
    """A search in args covers the newest ``TEXT_SCAN`` jobs only."""
    return await ops.bounded(flt, TEXT_SCAN)


async def jobs_page(ops: Operations, flt: JobFilter, redact: Redactor, *, limit: int,
                    before: int | None, after: int | None, cap: int) -> JobsPage:
    flt = await bounded(ops, flt)
    jobs = await ops.search_jobs(flt, limit + 1, before, after)
    more = len(jobs) > limit
    # A newer page was read upwards: its extra row is the newest one, at the front.
    jobs = jobs[-limit:] if after is not None else jobs[:limit]
    count = await ops.count_matching(flt, cap + 1)
    rows = [JobRow(j, arguments_preview(j), last_error(j)) for j in map(redact, jobs)]
    newer = jobs[0].id if jobs and (before is not None or (after is not None and more)) else None
    older = jobs[-1].id if jobs and (more or after is not None) else None
    return JobsPage(rows, min(count, cap), count > cap, newer, older)


@dataclasses.dataclass(frozen=True, slots=True)
class TimelineEntry:
    at: datetime
    what: str
    detail: str = ""
    kind: str = "info"


@dataclasses.dataclass(frozen=True, slots=True)
class AttemptRun:
    """One attempt on the job page: which worker ran it, how long, and how it ended."""

    attempt: int | str
    at: str
    outcome: str
    run_time: float | None = None
    node: str | None = None
    host: str | None = None
    pid: int | None = None
    error: str = ""
    traceback: str = ""

    @property
    def runner(self) -> str:
        """``node abc… on host (pid 12)``, as much of it as is known."""
        where = f" on {self.host}" if self.host else ""
        pid = f" (pid {self.pid})" if self.pid is not None else ""
        return f"node {self.node}{where}{pid}" if self.node else f"{where.strip()}{pid}".strip()


@dataclasses.dataclass(frozen=True, slots=True)
class JobDetail:
    job: Job
    timeline: list[TimelineEntry]
    can_retry: bool
    can_cancel: bool
    can_discard: bool
    #: Any job but a running one (cancel it first).
    can_delete: bool = False
    #: Every recorded attempt, newest first: the failed ones from ``errors``, then the
    #: latest one when it did not fail (``ran_on``, ``run_time``).
    attempts: list[AttemptRun] = dataclasses.field(default_factory=list)
    #: The key fingerprint of arguments sealed at rest (``encrypt=True``), else None.
    sealed: str | None = None
    #: What holds a waiting job back (explain_job's reasons), e.g. "no live worker
    #: knows task X"; empty for running and finished jobs.
    why: list[str] = dataclasses.field(default_factory=list)
    #: The batch whose callback this job is (its own batch, if any, is ``job.batch_id``).
    callback_of: int | None = None


def _parse_time(value: Any) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def timeline(job: Job) -> list[TimelineEntry]:
    """The job's history as its row tells it: enqueue, due time, each failed attempt,
    the last start, the end (there is no separate event log)."""
    entries = [TimelineEntry(job.created_at, "enqueued", f"queue {job.queue}")]
    if (job.scheduled_at - job.created_at).total_seconds() > 1:
        entries.append(TimelineEntry(job.scheduled_at, "due", "scheduled to run"))
    for error in job.errors:
        at = _parse_time(error.get("at"))
        if at is not None:
            run = _failed_run(error)
            ran = f" (ran {_duration(run.run_time)}, {run.runner})" if run.runner else ""
            entries.append(TimelineEntry(at, f"attempt {error.get('attempt', '?')} ended",
                                         first_line(str(error.get("error", ""))) + ran, "error"))
    if job.attempted_at is not None:
        entries.append(TimelineEntry(job.attempted_at, f"attempt {job.attempt} started",
                                     f"on {job.lease_owner}" if job.lease_owner else ""))
    if job.finished_at is not None:
        ran = (f"attempt {job.attempt} ran {_duration(job.run_time)} on node {job.ran_on}"
               if job.ran_on and job.state is JobState.COMPLETED else "")
        entries.append(TimelineEntry(job.finished_at, job.state.value, ran, job.state.value))
    entries.sort(key=lambda e: e.at)
    return entries


def _duration(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


def _failed_run(error: dict[str, Any]) -> AttemptRun:
    def text(key: str) -> str | None:
        value = error.get(key)
        return str(value) if value is not None else None

    run_time, pid = error.get("run_time"), error.get("pid")
    return AttemptRun(
        attempt=error.get("attempt", "?"), at=str(error.get("at", "")), outcome="failed",
        run_time=float(run_time) if isinstance(run_time, int | float) else None,
        node=text("node"), host=text("host"),
        pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
        error=str(error.get("error", "")), traceback=str(error.get("traceback") or ""))


def attempt_runs(job: Job, hosts: dict[str, tuple[str, int]]) -> list[AttemptRun]:
    """Each attempt, newest first. ``hosts`` maps node ids to (hostname, pid) for the
    latest attempt, whose worker is named by ``ran_on`` alone."""
    runs = [_failed_run(e) for e in job.errors if isinstance(e, dict)]
    failed_last = bool(job.errors) and job.errors[-1].get("attempt") == job.attempt
    if job.ran_on and job.state is JobState.COMPLETED and not failed_last:
        host, pid = hosts.get(job.ran_on, (None, None))
        runs.append(AttemptRun(
            attempt=job.attempt, at=job.finished_at.isoformat() if job.finished_at else "",
            outcome=job.state.value, run_time=job.run_time, node=job.ran_on, host=host,
            pid=pid))
    runs.reverse()
    return runs


async def job_detail(ops: Operations, job_id: int, redact: Redactor) -> JobDetail | None:
    job = await ops.get_job(job_id)
    if job is None:
        return None
    hosts = ({n.id: (n.hostname, n.pid) for n in await ops.nodes()} if job.ran_on else {})
    return JobDetail(
        redact(job), timeline(job), can_retry=job.state in RETRYABLE_FROM,
        can_cancel=job.state in (*DISCARDABLE_FROM, JobState.RUNNING) and not job.cancel_requested,
        can_discard=job.state in DISCARDABLE_FROM, attempts=attempt_runs(job, hosts),
        sealed=sealed_key(job.args, job.kwargs),
        can_delete=job.state is not JobState.RUNNING,
        why=await _why_waiting(ops, job), callback_of=await ops.callback_batch(job.id),
    )


async def _why_waiting(ops: Operations, job: Job) -> list[str]:
    """explain_job's reasons for a job that waits to start (not running, not final)."""
    if job.state.is_final or job.state == JobState.RUNNING:
        return []
    try:
        return (await ops.app.explain_job_async(job.id)).reasons
    except JobNotFoundError:  # deleted between the two reads
        return []


async def failure_groups(ops: Operations, queue: str | None,
                         task: str | None) -> list[FailureGroup]:
    return await ops.failure_groups(queue, task)


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


async def workers(ops: Operations) -> list[NodeView]:
    nodes = await ops.nodes()
    running = await ops.running_by_node()
    leader = await ops.leader()
    now = await ops.clock_now()
    return [NodeView(n.id, n.hostname, n.pid, n.queues, n.started_at,
                     max((now - n.heartbeat_at).total_seconds(), 0.0), n.alive,
                     running.get(n.id, 0), leader is not None and leader.node_id == n.id,
                     n.labels, n.version)
            for n in nodes]


async def health(ops: Operations, timeout: float = 3.0) -> DbHealth:
    return await ops.health(timeout)


async def prometheus(ops: Operations) -> bytes:
    """``/metrics``: the same families as ``conveyor.contrib.prometheus.ConveyorCollector``
    (one code path), read on the dashboard's event loop."""
    return _prometheus.exposition(_prometheus.families(await _prometheus.read(ops.app)))


def prometheus_down() -> bytes:
    """``/metrics`` while the database cannot be used: ``conveyor_database_up 0``."""
    return _prometheus.exposition(_prometheus.families(None))
