"""A page of jobs (a filter, keyset cursors, a capped count) and one job's detail
(timeline, attempts, what it may do next, why it waits): what the dashboard's job pages
read, written once. Arguments are redacted by the caller's ``Redactor``; sealed ones
(``encrypt=True``) are named, never decrypted."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..._errors import JobNotFoundError
from ..._job import DISCARDABLE_FROM, RETRYABLE_FROM, Job, JobState
from ..._payload_crypt import sealed_key
from ..._redact import Redactor
from ..._storage import JobEdit, JobFilter
from ..maintenance import bulk_filter
from ..search import SCAN, Window

if TYPE_CHECKING:
    from ..operations import Operations

#: Characters of args shown in a list row; the detail page shows them all.
PREVIEW_CHARS = 120
#: A search in args (or by tag) reads at most this many job ids per page, a window
#: that moves with the page's cursor (it cannot use an index; ``_app/search.py``).
TEXT_SCAN = SCAN


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
    #: The ids a search by tag or in arguments read (one window of ``TEXT_SCAN``), and
    #: where it ended; None for a filter an index serves.
    window: Window | None = None


async def bounded(ops: Operations, flt: JobFilter, before: int | None = None) -> JobFilter:
    """A search in args or by tag reads the ``TEXT_SCAN`` ids below ``before`` (the
    newest without it): a bulk action acts on the window its list showed."""
    return (await ops.bounded(flt, TEXT_SCAN, before=before))[0]


async def jobs_page(ops: Operations, flt: JobFilter, redact: Redactor, *, limit: int,
                    before: int | None, after: int | None, cap: int) -> JobsPage:
    """One page, newest first. A search by tag or in arguments reads one window of
    ``TEXT_SCAN`` ids below ``before`` (above ``after``): when the window ends before
    the page is full, the older (newer) cursor is the window's edge, so paging on
    searches the next window and reaches every match, each page's cost bounded."""
    flt, win = await ops.bounded(flt, TEXT_SCAN, before=before, after=after)
    jobs = await ops.search_jobs(flt, limit + 1, before, after)
    more = len(jobs) > limit
    # A newer page was read upwards: its extra row is the newest one, at the front.
    jobs = jobs[-limit:] if after is not None else jobs[:limit]
    count = await ops.count_matching(flt, cap + 1)
    rows = [JobRow(j, arguments_preview(j), last_error(j)) for j in map(redact, jobs)]
    newer, older = _cursors([j.id for j in jobs], more, before, after, win)
    return JobsPage(rows, min(count, cap), count > cap, newer, older, win)


def _cursors(ids: list[int], more: bool, before: int | None, after: int | None,
             win: Window | None) -> tuple[int | None, int | None]:
    """The newer page's ``after`` and the older page's ``before``. Within a window, a
    page that is not full goes on from the window's edge (the next window), and an
    empty one from its own cursor, so no page is a dead end."""
    first, last = (ids[0], ids[-1]) if ids else (None, None)
    if after is not None:  # read upwards from ``after``
        newer = first if more else (win.newer if win is not None else None)
        return newer, last if ids else (after + 1 if win is not None else None)
    newer = first if before is not None else None
    if newer is None and before is not None and win is not None:
        newer = before - 1
    return newer, last if more else (win.older if win is not None else None)


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
    #: How its task runs in chunks ("up to 100 jobs per handler call, ..."), else None.
    chunk: str | None = None
    #: Operators' edits of its arguments (edit and retry), oldest first.
    edits: list[JobEdit] = dataclasses.field(default_factory=list)
    #: The arguments as JSON to start an edit from, when they may be shown whole (not
    #: sealed, nothing redacted); None: the edit form starts empty.
    edit_args: str | None = None
    edit_kwargs: str | None = None


def _parse_time(value: Any) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def timeline(job: Job, edits: Sequence[JobEdit] = ()) -> list[TimelineEntry]:
    """The job's history as its row tells it: enqueue, due time, each failed attempt,
    the last start, the end; and the operators' edits of its arguments (their own
    table, ``job_edits``)."""
    entries = [TimelineEntry(job.created_at, "enqueued", f"queue {job.queue}")]
    for edit in edits:
        changed = [n for n, a, b in (("args", edit.args_before, edit.args),
                                     ("kwargs", edit.kwargs_before, edit.kwargs)) if a != b]
        who = edit.source + (f" (user {edit.actor})" if edit.actor else "")
        what = " and ".join(changed) or "nothing"
        entries.append(TimelineEntry(edit.at, "edited and retried",
                                     f"{what} changed, asked by {who}", "edit"))
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
    shown = redact(job)  # the timeline and the attempts quote its errors
    edits = await ops.job_edits(job.id)
    whole = (sealed_key(job.args, job.kwargs) is None
             and (shown.args, shown.kwargs) == (job.args, job.kwargs))
    return JobDetail(
        shown, timeline(shown, edits), can_retry=job.state in RETRYABLE_FROM,
        edits=edits, edit_args=_json(job.args) if whole else None,
        edit_kwargs=_json(job.kwargs) if whole else None,
        can_cancel=job.state in (*DISCARDABLE_FROM, JobState.RUNNING) and not job.cancel_requested,
        can_discard=job.state in DISCARDABLE_FROM, attempts=attempt_runs(shown, hosts),
        sealed=sealed_key(job.args, job.kwargs),
        can_delete=job.state is not JobState.RUNNING,
        why=await _why_waiting(ops, job), callback_of=await ops.callback_batch(job.id),
        chunk=_chunk(ops, job),
    )


def _chunk(ops: Operations, job: Job) -> str | None:
    """A chunk task's job runs with others of its task in one handler call."""
    task = ops.app.tasks.get(job.task)
    chunk = task.defaults.chunk if task is not None else None
    if chunk is None:
        return None
    return (f"up to {chunk.size} jobs per handler call, gathered for up to {chunk.wait:g}s "
            "after the first is claimed")


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


async def _why_waiting(ops: Operations, job: Job) -> list[str]:
    """explain_job's reasons for a job that waits to start (not running, not final)."""
    if job.state.is_final or job.state == JobState.RUNNING:
        return []
    try:
        return (await ops.app.explain_job_async(job.id)).reasons
    except JobNotFoundError:  # deleted between the two reads
        return []


@dataclasses.dataclass(frozen=True, slots=True)
class BulkPreview:
    """What a bulk ``action`` on a filter would change, before it is confirmed."""

    #: Each state the action changes and how many jobs match in it (capped).
    per_state: list[tuple[JobState, int]]
    #: All of them, counted up to the cap plus one (``over``: more than the cap).
    matching: int
    #: A few of the jobs it would change, newest first, redacted.
    sample: list[Job]

    def over(self, cap: int) -> bool:
        return self.matching > cap


async def bulk_preview(ops: Operations, action: str, flt: JobFilter, cap: int,
                       redact: Redactor, sample: int = 10) -> BulkPreview:
    """``flt`` as a bulk ``action`` ("retry" or "discard") reads it: its states, the
    counts (each stops past ``cap``) and ``sample`` of the jobs."""
    per_state = await ops.count_bulk(action, flt, cap + 1)
    narrowed = bulk_filter(action, flt)
    jobs = await ops.search_jobs(narrowed, sample) if narrowed else []
    return BulkPreview(per_state, sum(n for _, n in per_state), [redact(j) for j in jobs])
