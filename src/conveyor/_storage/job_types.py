"""Params and rows of the job methods of the storage protocol: enqueue, claim, ack,
heartbeat, rescue, staging, reads, filtered search, bounded counts and bulk actions.

A call that takes several values takes one frozen ``*Params`` dataclass (so a new field
never breaks a call site); a call that takes one value takes it plainly (``protocol.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime

from .._job import JobState


@dataclasses.dataclass(frozen=True, slots=True)
class JobInsert:
    task: str
    queue: str
    args_json: str
    kwargs_json: str
    priority: int
    max_attempts: int
    tags_json: str
    meta_json: str
    delay: float | None = None
    run_at: datetime | None = None
    #: Full unique key (period bucket included); None for a job that is not unique.
    unique_key: str | None = None
    #: Comma-wrapped states in which the key is held, e.g. ",available,running,".
    unique_states: str | None = None
    concurrency_key: str | None = None
    #: The worker labels the job requires, as a JSON object (sorted keys); None for a
    #: job without requirements. A batch with one takes the general insert, never the
    #: plain ones (``is_plain``).
    requires_json: str | None = None
    #: The job never starts after this (database clock): seconds from the insert, or a
    #: moment; None for a job that does not expire (``task.options(expires_in=...)``).
    expires_in: float | None = None
    expires_at: datetime | None = None
    #: ``Unique(on_conflict="replace")``: a waiting holder of the key takes this job's
    #: arguments and run time (``unique.py``) instead of being returned as it is.
    unique_replace: bool = False
    #: The key whose jobs take turns with other keys' in claims (docs "Fair keys").
    fair_key: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class JobFetchAvailableParams:
    queue: str
    limit: int
    owner: str
    lease_ttl: float
    #: A routed claim (``job_fetch_available_routed``): the worker's labels (a job's
    #: requirements must all be among them) and the tasks it serves (None: any). With
    #: neither, the plain claim takes only jobs without requirements.
    labels: Mapping[str, str] | None = None
    tasks: Sequence[str] | None = None

    @property
    def routed(self) -> bool:
        return bool(self.labels) or self.tasks is not None
    #: Claim round-robin across the queue's fair keys (``fairness.py``) instead of in
    #: plain order: chosen per queue by its producer, so a plain queue pays nothing.
    fair: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class JobAck:
    """The fenced outcome of one attempt: applied only if ``lease_token`` still matches."""

    id: int
    lease_token: int
    state: JobState
    #: Seconds from now (database clock) for the next run, for retryable/available.
    delay: float | None = None
    result_json: str | None = None
    error_json: str | None = None
    #: -1 gives the attempt back (snooze, shutdown release); 0 otherwise.
    attempt_delta: int = 0
    #: Seconds the attempt ran (stored in ``run_time``, with the batch's node in
    #: ``ran_on``); None for an outcome no attempt made (a job held back by a limit).
    run_time: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class JobAckManyParams:
    acks: Sequence[JobAck]
    #: The worker node whose attempts these are (``ran_on``).
    node: str | None = None
    #: Plain completions go straight to history where the archiving rule lets them (a
    #: worker whose ``archive_after`` is 0, whose archiver would move them at once).
    retire: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class JobLease:
    id: int
    lease_token: int


@dataclasses.dataclass(frozen=True, slots=True)
class JobHeartbeatManyParams:
    leases: Sequence[JobLease]
    lease_ttl: float


@dataclasses.dataclass(frozen=True, slots=True)
class JobHeartbeatResult:
    """Leases still held, and which of them an operator asked to cancel."""

    held: frozenset[int]
    cancel_requested: frozenset[int]


@dataclasses.dataclass(frozen=True, slots=True)
class JobProgress:
    """One running attempt's latest progress, fenced by its lease: ``progress`` None
    keeps the stored fraction and message, ``meta_json`` None keeps the stored meta."""

    id: int
    lease_token: int
    progress: float | None
    message: str | None
    meta_json: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class JobRescueExpiredParams:
    limit: int = 1000
    #: Jobs of a node whose heartbeat is older than this are rescued too; None uses each
    #: node's own ttl (``NodeUpsertParams.ttl``).
    node_ttl: float | None = None
    error_json: str = '{"error": "lease expired: the worker stopped heartbeating"}'


@dataclasses.dataclass(frozen=True, slots=True)
class JobExpireParams:
    """The expirer's pass: up to ``limit`` waiting jobs past their ``expires_at`` end
    cancelled, ``error_json`` (reason "expired") added to their errors."""

    limit: int = 1000
    error_json: str = ('{"error": "expired: not started before its expires_at", '
                       '"reason": "expired"}')


@dataclasses.dataclass(frozen=True, slots=True)
class JobClaimOneParams:
    """Claim one chosen job (the testing toolkit's inline mode); ``early`` also takes
    it while scheduled or retryable."""

    id: int
    owner: str
    lease_ttl: float = 30.0
    early: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class StagedJob:
    """A job the stager made available, and the state it left."""

    id: int
    task: str
    queue: str
    attempt: int
    previous: JobState


@dataclasses.dataclass(frozen=True, slots=True)
class JobListParams:
    state: JobState | None = None
    queue: str | None = None
    task: str | None = None
    limit: int = 50
    #: Keyset pagination: only jobs with an id below this one.
    before_id: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class JobArchiveParams:
    """One batch of the archiver: up to ``limit`` jobs finished ``after`` seconds ago or
    more move from the hot table to history."""

    after: float = 0.0
    limit: int = 5000


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
    #: Keyword arguments to match, as canonical JSON: a dict whose leaves are JSON
    #: scalars, nested dicts matched by path (``conveyor._app.search``).
    args_contains: str | None = None
    #: A failure group's key: the first line of the job's last error (200 chars at most).
    error_key: str | None = None
    ids: tuple[int, ...] = ()
    #: Only jobs with at least this id, and at most ``max_id``: the window of ids a scan
    #: without an index reads (``conveyor._app.search.window``).
    min_id: int | None = None
    max_id: int | None = None


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
class StateCount:
    """``queue`` is None for the capped totals of the final states."""

    queue: str | None
    state: JobState
    n: int
    capped: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class RequiresCount:
    """Waiting jobs of ``queue`` that require the worker labels ``requires``."""

    queue: str
    requires: dict[str, str]
    n: int


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


# -- maintenance: delete and purge (``<dialect>/sql/maintenance.sql``) -------------------


@dataclasses.dataclass(frozen=True, slots=True)
class JobPurgeParams:
    """Which jobs a purge deletes, and one keyset batch of them. Running jobs never
    match, whatever ``states`` says. A purge counts first (``job_purge_count``, which
    gives the highest matching id), then deletes batches up to that id only: jobs that
    start to match during the purge are left alone, so the count an operator
    confirmed is the most it deletes."""

    states: tuple[JobState, ...]
    queue: str | None = None
    task: str | None = None
    #: Only jobs finished (never finished: created) more than this many seconds ago.
    older_than: float | None = None
    #: The batch looks at ids above this one...
    after_id: int = 0
    #: ...and at most this one (None: no bound).
    max_id: int | None = None
    limit: int = 1000


@dataclasses.dataclass(frozen=True, slots=True)
class JobQueueDeleteParams:
    """One batch of deleting every job of ``queue``, whatever its state (running jobs
    too): up to ``limit`` jobs with an id above ``after_id``, hot table and history
    (10,000 a batch: 50,000 jobs go in 0.4-0.5 s on either backend)."""

    queue: str
    after_id: int = 0
    limit: int = 10_000


@dataclasses.dataclass(frozen=True, slots=True)
class JobPurgeCount:
    """How many jobs a purge matches now, per state, and the highest matching id."""

    counts: dict[JobState, int]
    max_id: int | None

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclasses.dataclass(frozen=True, slots=True)
class JobPurgeBatch:
    """What one purge batch deleted (with the state each job had), and where the next
    batch starts: None when no matching job is left to look at."""

    deleted: list[JobChanged]
    next_after: int | None
