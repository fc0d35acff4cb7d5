"""The storage protocol every backend implements (each by subclassing BaseStorage).

Methods are named noun-then-verb, so related methods sort together. One calling
convention: a method that needs one value takes it as a plain argument (an optional
one, or a flag, by keyword: ``job_get(job_id)``, ``job_stage_due(limit=100)``); a
method that needs several takes one small frozen ``*Params`` dataclass, so a new field
never breaks a call site (``job_fetch_available(JobFetchAvailableParams(...))``).
Timestamps that decide anything (due times, leases) are computed by the database
clock, never here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

from .._job import Job
from .control_types import (
    ConcurrencyGroup,
    FairKeyRow,
    FairWeightSetParams,
    JobPruneParams,
    LeaderElectParams,
    LeaderResignParams,
    LeaderRow,
    NodeRow,
    NodeUpsertParams,
    QueueRow,
    QueueUpdateParams,
    RateGrant,
    RateRequest,
    ScheduleAdvanceParams,
    ScheduleRow,
    ScheduleSetPausedParams,
    ScheduleUpsertParams,
)
from .cooldown_types import QueueCooldownRaiseParams, QueueCooldownRow
from .edit_types import JobEdit, JobEditParams
from .job_types import (
    FailureGroup,
    JobAckManyParams,
    JobArchiveParams,
    JobBulkParams,
    JobChanged,
    JobClaimOneParams,
    JobCountCappedParams,
    JobExpireParams,
    JobFailureGroupsParams,
    JobFetchAvailableParams,
    JobHeartbeatManyParams,
    JobHeartbeatResult,
    JobInsert,
    JobListParams,
    JobProgress,
    JobPurgeBatch,
    JobPurgeCount,
    JobPurgeParams,
    JobQueueDeleteParams,
    JobRescueExpiredParams,
    JobSearchParams,
    RequiresCount,
    StagedJob,
    StateCount,
)
from .limiter_types import LimiterDeclareParams, LimiterRow, LimiterSlotParams
from .metric_types import (
    DepthPoint,
    MetricPoint,
    MetricRow,
    MetricsSeriesParams,
    MetricTotal,
)
from .schema import DbHealth, Migration, TableDeadRows
from .wake import WakeCallback
from .workflow import ComposeParams
from .workflow_types import BatchJobsParams, BatchRow, Composed, DependencyRow, EdgeRow


@dataclasses.dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend can do; the runtime asks this instead of checking the dialect."""

    dialect: str
    #: How often idle producers poll when no wake-up arrives.
    poll_interval: float
    #: Jobs finished by other processes wake this one's waiters (PostgreSQL's NOTIFY);
    #: False: only this process's writes do, and waiters poll for the rest (SQLite).
    remote_finish_wakes: bool = False


class Storage(Protocol):
    """One job store. Both backends implement every method with the same semantics."""

    @property
    def capabilities(self) -> Capabilities: ...

    async def open(self, *, check_schema: bool = True) -> None:
        """Connect; with ``check_schema``, check (Postgres) or apply (SQLite) the schema."""

    async def close(self) -> None: ...

    async def schema_pending(self) -> list[Migration]: ...

    async def migrate(self, *, dry_run: bool = False) -> list[Migration]: ...

    async def job_insert_many(
        self, jobs: Sequence[JobInsert], connection: Any = None
    ) -> list[Job]: ...

    def job_insert_many_sync(self, jobs: Sequence[JobInsert], connection: Any) -> list[Job]:
        """Insert inside the caller's own synchronous connection and transaction."""

    def job_insert_many_blocking(self, jobs: Sequence[JobInsert]) -> list[Job]:
        """``job_insert_many`` for a synchronous caller on any thread, without an event
        loop in between (the sync API's path once the storage is open)."""

    async def job_insert_ids(
        self, jobs: Sequence[JobInsert], connection: Any = None
    ) -> list[int]:
        """``job_insert_many`` returning only the ids, in input order (an existing
        job's id for a unique duplicate): no Job is built for a batch without unique keys."""

    def job_insert_ids_blocking(self, jobs: Sequence[JobInsert]) -> list[int]:
        """``job_insert_ids`` for a synchronous caller, as ``job_insert_many_blocking``."""

    async def job_fetch_available(self, params: JobFetchAvailableParams) -> list[Job]: ...

    async def job_ack_many(self, params: JobAckManyParams) -> list[int]:
        """Apply fenced outcomes; return the ids whose write applied."""

    async def job_heartbeat_many(self, params: JobHeartbeatManyParams) -> JobHeartbeatResult: ...

    async def job_progress_many(self, entries: Sequence[JobProgress]) -> list[int]:
        """Write running jobs' progress (one statement or transaction), fenced by the
        lease; return the ids whose write applied."""

    async def job_rescue_expired(self, params: JobRescueExpiredParams) -> list[int]: ...

    async def job_stage_due(self, *, limit: int = 5000) -> list[StagedJob]:
        """Make due scheduled and retryable jobs available (at most ``limit`` of each)."""

    async def job_get(self, job_id: int) -> Job | None: ...

    async def job_list(self, params: JobListParams) -> list[Job]: ...

    async def job_retry(self, job_id: int) -> Job | None: ...

    async def job_retry_edited(self, params: JobEditParams) -> Job | None:
        """``job_retry`` with new arguments, the edit recorded (``job_edit_list``)."""

    async def job_edit_list(self, job_id: int) -> list[JobEdit]:
        """The edits of a job's arguments, oldest first."""

    async def job_cancel(self, job_id: int) -> Job | None: ...

    async def job_count_by_state(self, *, queue: str | None = None) -> dict[str, int]: ...

    async def node_upsert(self, params: NodeUpsertParams) -> None: ...

    async def node_delete(self, node_id: str) -> None: ...

    def wake_subscribe(self, callback: WakeCallback) -> Callable[[], None]:
        """Call ``callback`` when jobs may have become ready; returns an unsubscribe."""

    def finish_subscribe(self, callback: WakeCallback) -> Callable[[], None]:
        """Call ``callback`` when jobs may have reached a final state (``job.wait``);
        returns an unsubscribe. Called from any thread, maybe for jobs of no interest."""

    # -- cluster control (<dialect>/sql/control.sql) -----------------------------------

    async def clock_now(self) -> datetime:
        """The database clock: every due time, lease and cron tick is measured on it."""

    async def queue_list(self) -> list[QueueRow]: ...

    async def queue_update(self, params: QueueUpdateParams) -> None: ...

    async def node_list(self, *, live_within: float | None = None) -> list[NodeRow]: ...

    async def leader_elect(self, params: LeaderElectParams) -> LeaderRow | None:
        """Take or renew the role; returns the holder after the attempt (maybe another)."""

    async def leader_get(self, *, name: str = "leader") -> LeaderRow | None: ...

    async def leader_resign(self, params: LeaderResignParams) -> None: ...

    async def schedule_upsert(self, params: ScheduleUpsertParams) -> None: ...

    async def schedule_list(self) -> list[ScheduleRow]: ...

    async def schedule_set_paused(self, params: ScheduleSetPausedParams) -> bool: ...

    async def schedule_advance(self, params: ScheduleAdvanceParams) -> None: ...

    async def schedule_delete(self, name: str) -> bool: ...

    async def rate_limit_acquire(self, requests: Sequence[RateRequest]) -> list[RateGrant]:
        """Atomically take up to each request's count of starts from its budget."""

    async def rate_limit_get(self, key: str) -> float | None:
        """The key's theoretical arrival time (unix seconds), None if never used."""

    async def job_concurrency_acquire(self, groups: Sequence[ConcurrencyGroup]) -> frozenset[int]:
        """Grant concurrency slots to running jobs, never more than each key's limit."""

    async def job_concurrency_holders(self, key: str) -> list[int]: ...

    async def limiter_declare(self, params: LimiterDeclareParams) -> None:
        """Record what a limiter was declared as (the last declaration wins)."""

    async def limiter_slot_acquire(self, params: LimiterSlotParams) -> bool:
        """Lease a slot to ``params.holder`` if fewer than ``params.limit`` other live
        leases hold (name, key); race-free across processes. False: none free."""

    async def limiter_slot_renew(self, params: LimiterSlotParams) -> bool:
        """Extend a live lease; False if it ran out (the slot may be someone else's)."""

    async def limiter_slot_release(self, params: LimiterSlotParams) -> bool:
        """Give the slot back; False if it was not held (its lease ran out and was pruned)."""

    async def limiter_list(self) -> list[LimiterRow]:
        """Every declared limiter with its live holders."""

    async def job_fair_pending(self, queue: str) -> bool:
        """Does ``queue`` have available fair-keyed jobs? (its producer then claims with
        ``JobFetchAvailableParams(fair=True)``)"""

    async def fair_weight_set(self, params: FairWeightSetParams) -> None: ...

    async def fair_key_list(self, queue: str, *, limit: int = 1000) -> list[FairKeyRow]:
        """A queue's fair keys with waiting jobs or a weight, by key."""

    async def fair_key_prune(self, limit: int) -> int:
        """Forget up to ``limit`` idle fair keys (default weight, no available job: a
        returning key starts level with the others as if it had a row); how many."""

    async def queue_cooldown_raise(self, params: QueueCooldownRaiseParams) -> QueueCooldownRow:
        """Start or grow the queue's cluster-wide cool-down; returns it as it now is."""

    async def queue_cooldown_list(self) -> list[QueueCooldownRow]:
        """Every queue's cool-down (ended ones too), with what remains of it now."""

    async def queue_cooldown_clear(self, queue: str) -> bool:
        """End the queue's cool-down at once; False if it had none."""

    async def job_count_ahead(self, job_id: int) -> int: ...

    async def job_prune(self, params: JobPruneParams) -> int:
        """Delete one bounded batch of old finished jobs (and stale nodes), from the hot
        table and from history; return count."""

    # -- history (<dialect>/sql/history.sql) ------------------------------------------------

    async def job_archive(self, params: JobArchiveParams) -> int:
        """Move one batch of finished jobs from the hot table to history (one
        transaction); how many moved. Rows holding a unique claim stay."""

    async def job_history_prepare(self, days: int) -> int:
        """Make history's day partitions for today and ``days`` more (PostgreSQL; SQLite
        has none); how many were made."""

    async def job_history_drop(self, params: JobPruneParams) -> int:
        """Drop history's whole days older than ``params``' ages, per state class
        (PostgreSQL partitions; SQLite prunes by row); how many jobs they held."""

    # -- one-off maintenance (<dialect>/sql/maintenance.sql) ------------------------------

    async def job_delete(self, job_id: int, *, force: bool = False) -> Job | None:
        """Delete one job; a running one only with ``force``. The row as it was, or None
        (no such job, or running without ``force``)."""

    async def job_delete_by_queue(self, params: JobQueueDeleteParams) -> JobPurgeBatch:
        """Delete one batch of a queue's jobs, whatever their state (running ones too),
        by id upwards; the caller repeats from ``next_after`` until it is None."""

    async def job_purge_count(self, params: JobPurgeParams) -> JobPurgeCount:
        """How many jobs a purge matches now, per state, and the highest matching id."""

    async def job_purge_batch(self, params: JobPurgeParams) -> JobPurgeBatch:
        """Delete one bounded batch of matching jobs (never running ones), each batch a
        short transaction of its own."""

    async def job_prune_count(self, params: JobPruneParams) -> int:
        """How many jobs ``job_prune`` would delete now, all batches together."""

    async def job_rescue_candidates(self, params: JobRescueExpiredParams) -> list[Job]:
        """The running jobs ``job_rescue_expired`` would rescue now (at most ``limit``)."""

    # -- search, bulk actions and metrics (<dialect>/sql/search.sql, metrics.sql) --------

    async def job_search(self, params: JobSearchParams) -> list[Job]:
        """Jobs matching a filter, newest first, one keyset page."""

    async def job_count_capped(self, params: JobCountCappedParams) -> int:
        """How many jobs match, counting no further than ``params.cap``."""

    async def job_count_by_queue(self, *, final_cap: int = 100_000) -> list[StateCount]:
        """Exact waiting/running counts per queue; capped totals of the final states."""

    async def job_count_final_by_queue(self) -> list[StateCount]:
        """Exact counts of the final states per queue (one pass over finished rows)."""

    async def job_count_requiring(self, *, limit: int = 1000) -> list[RequiresCount]:
        """Waiting jobs that require worker labels, per queue and requirement."""

    async def job_failure_groups(self, params: JobFailureGroupsParams) -> list[FailureGroup]: ...

    async def job_retry_matching(self, params: JobBulkParams) -> list[JobChanged]:
        """Retry (as ``job_retry``) up to ``limit`` jobs matching the filter, oldest first."""

    async def job_discard_matching(self, params: JobBulkParams) -> list[JobChanged]:
        """Discard up to ``limit`` waiting jobs matching the filter, oldest first."""

    async def job_expire(self, params: JobExpireParams) -> list[JobChanged]:
        """Cancel up to ``limit`` waiting jobs whose ``expires_at`` has passed (the
        expirer); the jobs it changed, with the state each left."""

    async def job_count_running_by_node(self) -> dict[str, int]: ...

    async def db_health(self, *, timeout: float = 3.0) -> DbHealth:
        """Reachable on a fresh connection, and at which schema version; never raises."""

    async def table_dead_rows(self) -> list[TableDeadRows]:
        """Conveyor's tables with dead row versions to reclaim, most first (PostgreSQL;
        SQLite reuses a deleted row's space at once and lists none)."""

    async def table_vacuum(self, name: str) -> None:
        """VACUUM one table ``table_dead_rows`` listed, skipping it if another VACUUM
        holds it (PostgreSQL; nothing to do on SQLite)."""

    async def metrics_add(self, rows: Sequence[MetricRow]) -> None:
        """Add samples to the minute rollups (rows with a bucket) and the totals."""

    async def metrics_series(self, params: MetricsSeriesParams) -> list[MetricPoint]: ...

    async def metrics_totals(self) -> list[MetricTotal]: ...

    async def metrics_depth_sample(self, bucket: float) -> None: ...

    async def metrics_depth_series(self, params: MetricsSeriesParams) -> list[DepthPoint]: ...

    async def metrics_prune(self, before: float) -> int: ...

    # -- workflows and batches (composition.py; settled by migration 0010's triggers) ----

    async def compose(self, params: ComposeParams, connection: Any = None) -> Composed:
        """Insert a workflow, a batch or a batch's new members in one transaction (the
        caller's when ``connection`` is given); unknown dependency ids raise, writing
        nothing; BatchNotFoundError / BatchClosedError for a batch that takes no jobs."""

    def compose_sync(self, params: ComposeParams, connection: Any) -> Composed:
        """The same on the caller's own sync connection, on the caller's thread."""

    async def batch_close(self, batch_id: int) -> BatchRow | None: ...

    async def batch_get(self, batch_id: int) -> BatchRow | None: ...

    async def workflow_jobs(self, workflow_id: str) -> list[Job]: ...

    async def batch_jobs(self, params: BatchJobsParams) -> list[Job]:
        """A page of a batch's members in id order, after ``after_id`` (the dashboard)."""

    async def workflow_edges(self, workflow_id: str) -> list[EdgeRow]: ...

    async def job_dependencies(self, job_id: int) -> list[DependencyRow]: ...

    async def batch_waited_on(self, job_id: int) -> int | None:
        """The batch a callback job waits for; None for any other job."""

    # -- the testing toolkit (<dialect>/testing.sql, loaded on first use) ----------------

    @property
    def virtual_clock(self) -> bool:
        """True when every statement measures time on the virtual clock."""

    def use_virtual_clock(self) -> None:
        """Rewrite the statements to the virtual clock (database clock + stored offset)."""

    async def clock_join(self, offset: float) -> float:
        """Create the clock's row if needed; the offset in force (the larger one)."""

    async def clock_set(self, offset: float) -> float:
        """Advance the stored offset (never back); the offset in force."""

    async def job_claim_one(self, params: JobClaimOneParams) -> Job | None:
        """Claim one chosen job, as ``job_fetch_available`` would (inline mode)."""

    async def job_stage_early(self, *, queue: str | None = None) -> list[StagedJob]:
        """Make waiting jobs available now, due or not (``drain(include_scheduled=True)``)."""
