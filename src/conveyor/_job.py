"""The job model: states, the Job record, and what a handler's outcome becomes."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol


class JobState(StrEnum):
    """Every state a job row can be in; mirrored by a CHECK constraint in both schemas.

    Example: ``app.list_jobs(state=JobState.DISCARDED)``
    """

    #: Waiting on its dependencies, or a batch callback waiting on its batch.
    PENDING = "pending"
    SCHEDULED = "scheduled"
    AVAILABLE = "available"
    RUNNING = "running"
    COMPLETED = "completed"
    RETRYABLE = "retryable"
    CANCELLED = "cancelled"
    DISCARDED = "discarded"

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATES


#: The largest id a job or batch row can have: both databases store ids as signed
#: 64-bit ints, so an id past it names no row (the API says "not found").
MAX_ID = 2**63 - 1

# The sets of states, defined here once; storage, the CLI and the dashboard import them.
#: A job in one of these is done: it runs again only if retried.
FINAL_STATES = frozenset({JobState.COMPLETED, JobState.CANCELLED, JobState.DISCARDED})
#: States a job waits or runs in; their counts are exact, and are the queue depth.
ACTIVE_STATES = (JobState.PENDING, JobState.SCHEDULED, JobState.AVAILABLE, JobState.RUNNING,
                 JobState.RETRYABLE)
#: States that wait for a time (a delay or a backoff); the stager makes them available.
STAGED_STATES = (JobState.SCHEDULED, JobState.RETRYABLE)
#: States a job waits to start in (not yet running, not final).
WAITING_STATES = (JobState.SCHEDULED, JobState.AVAILABLE, JobState.RETRYABLE)
#: States ``retry`` (one job or in bulk) applies to.
RETRYABLE_FROM = (JobState.SCHEDULED, JobState.RETRYABLE, JobState.COMPLETED,
                  JobState.CANCELLED, JobState.DISCARDED)
#: States an operator may discard or cancel at once from (a running job is asked to stop).
DISCARDABLE_FROM = (JobState.PENDING, *WAITING_STATES)
#: States that record a failed attempt (the dashboard's failures page).
FAILED_STATES = (JobState.RETRYABLE, JobState.DISCARDED)
#: The error message of a job that expired before it started (it ends cancelled, its
#: error entry's ``reason`` is "expired"): one text, so that the jobs list's error filter
#: finds every expired job (the dashboard's "expired" link).
EXPIRED_ERROR = "expired: not started before its expires_at"


class JobWaiter(Protocol):
    """What a Job's ``wait`` asks: the app that read it (``_app/results.py``)."""

    def wait_job(self, job_id: int, timeout: float | None) -> Job: ...

    async def wait_job_async(self, job_id: int, timeout: float | None) -> Job: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Job:
    """A snapshot of one job row, as returned by enqueue, get_job and list_jobs.

    A worker's claimed Job holds its JSON fields as ``JsonText`` until first read
    (below): arguments are decoded when the handler runs.

    Example: ``job = app.get_job(42); print(job.state, job.attempt)``
    """

    id: int
    task: str
    queue: str
    args: list[Any]
    kwargs: dict[str, Any]
    priority: int
    state: JobState
    attempt: int
    max_attempts: int
    scheduled_at: datetime
    created_at: datetime
    attempted_at: datetime | None = None
    finished_at: datetime | None = None
    errors: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    result: Any = None
    tags: list[str] = dataclasses.field(default_factory=list)
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
    lease_owner: str | None = None
    lease_token: int | None = None
    lease_expires_at: datetime | None = None
    cancel_requested: bool = False
    unique_key: str | None = None
    concurrency_key: str | None = None
    #: True when enqueue found a live job with the same unique key and returned it.
    duplicate: bool = False
    #: The worker node (``WorkerConfig``'s node id, see ``list_nodes``) that ran the
    #: latest attempt, and how many seconds that attempt ran. Each failed attempt's entry
    #: in ``errors`` carries its own ``node``, ``host``, ``pid`` and ``run_time``.
    ran_on: str | None = None
    run_time: float | None = None
    #: The workflow (``enqueue_workflow``) and the batch (``batch``) this job belongs to,
    #: and how many of its dependencies are not final yet (state ``pending`` until 0).
    workflow_id: str | None = None
    batch_id: int | None = None
    deps_pending: int = 0
    #: What the handler last reported with ``current_job().set_progress`` (a fraction
    #: in 0..1 and a message), written by its worker every ~0.5 s and at the job's end.
    progress: float | None = None
    progress_message: str | None = None
    #: The worker labels the job requires (``@app.task(requires=...)``); only a worker
    #: started with all of them claims it. None: any worker.
    requires: dict[str, str] | None = None
    #: A job not started by then never runs: it ends ``cancelled`` with the reason
    #: "expired" (``task.options(expires_in=...)``); None for a job that does not expire.
    expires_at: datetime | None = None
    #: The fair key this job takes turns under (``fair_key=``), None for a plain job.
    fair_key: str | None = None
    #: The app this snapshot was read through, for ``wait``; not part of the record.
    _waiter: JobWaiter | None = dataclasses.field(default=None, compare=False, repr=False)

    def wait(self, timeout: float | None = None) -> Job:
        """Block until this job is final; the finished job, its ``result`` decoded as
        the task's return annotation. Raises ``JobDiscardedError``/``JobCancelledError``
        (with the last error), or ``WaitTimeoutError`` (a ``TimeoutError``) after
        ``timeout`` seconds, leaving the job as it is. See docs/results.md.

        Example: ``report = build_report.enqueue(7).wait(timeout=60).result``
        """
        return self._app_waiter().wait_job(self.id, timeout)

    async def wait_async(self, timeout: float | None = None) -> Job:
        """Async twin of ``wait``. Example: ``done = await job.wait_async(timeout=60)``"""
        return await self._app_waiter().wait_job_async(self.id, timeout)

    def __getstate__(self) -> list[Any]:
        """Pickled without its app: only a process's own app can wait for it."""
        return [None if f.name == "_waiter" else getattr(self, f.name)
                for f in dataclasses.fields(self)]

    def _app_waiter(self) -> JobWaiter:
        if self._waiter is None:
            raise RuntimeError(
                f"job {self.id} was not read through an app (built or decoded elsewhere): "
                "wait on it with app.wait_jobs([job]) or app.get_job(job.id).wait()"
            )
        return self._waiter

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict (datetimes as ISO strings), used by the CLI's --json."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name == "_waiter":
                continue
            value = getattr(self, f.name)
            if isinstance(value, datetime):
                value = value.isoformat()
            elif isinstance(value, JobState):
                value = value.value
            out[f.name] = value
        return out


class JsonText(str):
    """A JSON column's text that a claim read and nobody has decoded yet. A Job holding
    one in ``args``, ``kwargs``, ``errors``, ``tags`` or ``meta`` decodes it on first
    access and keeps the value: a worker pays for its arguments when the handler runs,
    and for a retried job's earlier errors only if something reads them."""

    __slots__ = ()


_scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def loads(text: str | None, unreadable: Any = None) -> Any:
    """``json.loads``, a few times faster on short compact documents: the values most
    columns hold are answered without parsing, and the rest go straight to the C
    scanner, skipping ``json.loads``'s whitespace regexes (padding, trailing data and
    errors are left to ``json.loads``). A value that cannot be read gives
    ``unreadable``: a row written around the API must not block the queue (the worker
    discards a job whose args are unreadable)."""
    if text is None:
        return None
    if text == "[]":
        return []
    if text == "{}":
        return {}
    try:
        try:
            value, end = _scan(text, 0)
        except StopIteration:
            return json.loads(text)
        return value if end == len(text) else json.loads(text)
    except (ValueError, RecursionError):
        return unreadable


_UNREADABLE = object()


def _decoded_on_access(name: str, unreadable: Callable[[], Any]) -> None:
    """Make field ``name`` of Job a property over its slot that decodes a ``JsonText``
    on first read (``unreadable()`` if it is not JSON, the policy of ``loads``) and
    stores the value. Every reader (attribute, ``==``, ``repr``, ``replace``, pickling)
    goes through it, so a claimed Job is indistinguishable from one read whole."""
    slot = Job.__dict__[name]
    get, put = slot.__get__, slot.__set__

    def read(job: Job) -> Any:
        value = get(job, Job)
        if type(value) is JsonText:
            value = loads(value, _UNREADABLE)
            if value is _UNREADABLE:
                value = unreadable()
            put(job, value)
        return value

    setattr(Job, name, property(read, put, doc=f"The job's {name} (decoded on first read)."))


for _name, _unreadable in (("args", lambda: None), ("kwargs", lambda: None),
                           ("errors", list), ("tags", list), ("meta", dict),
                           ("requires", lambda: None)):
    _decoded_on_access(_name, _unreadable)
