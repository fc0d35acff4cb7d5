"""The job model: states, the Job record, and what a handler's outcome becomes."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from enum import StrEnum
from typing import Any


class JobState(StrEnum):
    """Every state a job row can be in; mirrored by a CHECK constraint in both schemas.

    Example: ``app.list_jobs(state=JobState.DISCARDED)``
    """

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


# The sets of states, defined here once; storage, the CLI and the dashboard import them.
#: A job in one of these is done: it runs again only if retried.
FINAL_STATES = frozenset({JobState.COMPLETED, JobState.CANCELLED, JobState.DISCARDED})
#: States a job waits or runs in; their counts are exact, and are the queue depth.
ACTIVE_STATES = (JobState.SCHEDULED, JobState.AVAILABLE, JobState.RUNNING, JobState.RETRYABLE)
#: States that wait for a time (a delay or a backoff); the stager makes them available.
STAGED_STATES = (JobState.SCHEDULED, JobState.RETRYABLE)
#: States a job waits to start in (not yet running, not final).
WAITING_STATES = (JobState.SCHEDULED, JobState.AVAILABLE, JobState.RETRYABLE)
#: States ``retry`` (one job or in bulk) applies to.
RETRYABLE_FROM = (JobState.SCHEDULED, JobState.RETRYABLE, JobState.COMPLETED,
                  JobState.CANCELLED, JobState.DISCARDED)
#: States an operator may discard or cancel at once from (a running job is asked to stop).
DISCARDABLE_FROM = WAITING_STATES
#: States that record a failed attempt (the dashboard's failures page).
FAILED_STATES = (JobState.RETRYABLE, JobState.DISCARDED)


@dataclasses.dataclass(frozen=True, slots=True)
class Job:
    """A snapshot of one job row, as returned by enqueue, get_job and list_jobs.

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

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict (datetimes as ISO strings), used by the CLI's --json."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, datetime):
                value = value.isoformat()
            elif isinstance(value, JobState):
                value = value.value
            out[f.name] = value
        return out
