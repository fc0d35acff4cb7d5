"""Params and rows of the observability part of the storage protocol: filtered search,
bounded counts, failure groups, bulk actions by filter, health, and metric rollups
(queries in ``sql/<dialect>/dashboard.sql`` and ``metrics.sql``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime

from .._job import JobState

#: States a job waits or runs in; their counts are exact, and are the queue depth.
ACTIVE_STATES = (JobState.SCHEDULED, JobState.AVAILABLE, JobState.RUNNING, JobState.RETRYABLE)
#: States that bulk retry applies to, as ``job_retry`` does for one job.
RETRYABLE_FROM = (JobState.SCHEDULED, JobState.RETRYABLE, JobState.COMPLETED,
                  JobState.CANCELLED, JobState.DISCARDED)
#: States an operator may discard from (a running job is cancelled instead).
DISCARDABLE_FROM = (JobState.SCHEDULED, JobState.AVAILABLE, JobState.RETRYABLE)


@dataclasses.dataclass(frozen=True, slots=True)
class JobFilter:
    """Which jobs a search, a count or a bulk action applies to; empty means any."""

    states: tuple[JobState, ...] = ()
    queue: str | None = None
    task: str | None = None
    #: One of the job's tags.
    tag: str | None = None
    #: Case-insensitive substring of the JSON of args and kwargs.
    text: str | None = None
    #: A failure group's key: the first line of the job's last error (200 chars at most).
    error_key: str | None = None
    ids: tuple[int, ...] = ()
    #: Only jobs with at least this id: bounds a scan to the newest jobs.
    min_id: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class JobSearchParams:
    """Newest first. Keyset pages: ``before_id`` for older jobs, ``after_id`` for newer."""

    filter: JobFilter = JobFilter()
    limit: int = 50
    before_id: int | None = None
    after_id: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class JobCountCappedParams:
    """Count matching jobs, but stop at ``cap``: a count never scans a whole table."""

    filter: JobFilter = JobFilter()
    cap: int = 10_000


@dataclasses.dataclass(frozen=True, slots=True)
class JobCountByQueueParams:
    #: Final states (completed, cancelled, discarded) are counted up to this many each.
    final_cap: int = 100_000


@dataclasses.dataclass(frozen=True, slots=True)
class StateCount:
    """``queue`` is None for the capped totals of the final states."""

    queue: str | None
    state: JobState
    n: int
    capped: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class JobFailureGroupsParams:
    """Group retryable and discarded jobs by task and the first line of their last error."""

    queue: str | None = None
    task: str | None = None
    limit: int = 100
    #: Only the most recent this many failed jobs are grouped.
    scan: int = 50_000


@dataclasses.dataclass(frozen=True, slots=True)
class FailureGroup:
    task: str
    #: First line of the last error, at most 200 characters.
    error: str
    retryable: int
    discarded: int
    last_id: int
    last_at: datetime | None

    @property
    def total(self) -> int:
        return self.retryable + self.discarded


@dataclasses.dataclass(frozen=True, slots=True)
class JobBulkParams:
    """A bulk action on every job matching ``filter``, at most ``limit`` of them."""

    filter: JobFilter
    limit: int = 10_000
    #: Appended to each job's errors by a discard.
    error_json: str = '{"error": "discarded by an operator"}'


@dataclasses.dataclass(frozen=True, slots=True)
class JobChanged:
    """A job a bulk action changed, with the state it left."""

    id: int
    task: str
    queue: str
    attempt: int
    previous: JobState


@dataclasses.dataclass(frozen=True, slots=True)
class DbHealth:
    reachable: bool
    #: Highest applied migration, None when unknown.
    version: int | None
    latest: int
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.reachable and self.version == self.latest


@dataclasses.dataclass(frozen=True, slots=True)
class DbHealthParams:
    timeout: float = 3.0


@dataclasses.dataclass(frozen=True, slots=True)
class MetricRow:
    """One additive sample: ``value`` is added to what the key already holds."""

    queue: str
    task: str
    metric: str
    value: float
    #: Start of the minute (unix seconds); None for the never-pruned totals.
    bucket: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class MetricsAddParams:
    rows: Sequence[MetricRow]


@dataclasses.dataclass(frozen=True, slots=True)
class MetricsSeriesParams:
    #: Unix seconds; buckets at or after it.
    since: float
    queue: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class MetricPoint:
    bucket: float
    queue: str
    metric: str
    value: float


@dataclasses.dataclass(frozen=True, slots=True)
class MetricTotal:
    queue: str
    task: str
    metric: str
    value: float


@dataclasses.dataclass(frozen=True, slots=True)
class MetricsDepthSampleParams:
    #: The minute (unix seconds) the sample is filed under.
    bucket: float


@dataclasses.dataclass(frozen=True, slots=True)
class DepthPoint:
    """``queue`` is ``"*"`` for all queues together (written with every sample)."""

    bucket: float
    queue: str
    state: str
    n: int


@dataclasses.dataclass(frozen=True, slots=True)
class MetricsPruneParams:
    #: Delete minute rollups and depth samples older than this (unix seconds).
    before: float
