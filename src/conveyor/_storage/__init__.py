"""Storage: one protocol, two backends (``sqlite/``, ``postgres/``) over one shared base
(``base.py``), chosen by URL.

Everything outside this package imports from here, never from its modules: the
backends and their helpers can move without touching a caller.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from .._errors import DatabaseUnavailableError
from .base import BaseStorage
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
from .fairness import FairKey, keys_ahead
from .job_types import (
    FailureGroup,
    JobAck,
    JobAckManyParams,
    JobArchiveParams,
    JobBulkParams,
    JobChanged,
    JobClaimOneParams,
    JobCountCappedParams,
    JobExpireParams,
    JobFailureGroupsParams,
    JobFetchAvailableParams,
    JobFilter,
    JobHeartbeatManyParams,
    JobHeartbeatResult,
    JobInsert,
    JobLease,
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
from .lazy_inserts import InsertRun, LazyInserts, lazy_batches, made_batches
from .limiter_types import LimiterDeclareParams, LimiterHolder, LimiterRow, LimiterSlotParams
from .metric_types import (
    DepthPoint,
    MetricPoint,
    MetricRow,
    MetricsSeriesParams,
    MetricTotal,
)
from .protocol import Capabilities, Storage
from .rows import fast_constructor, insert_with_arguments, loads, make_ack, make_insert, make_job
from .schema import (
    DbHealth,
    Migration,
    TableDeadRows,
    load_migrations,
    load_queries,
    pending_migrations,
)
from .testdb import create_database, drop_database
from .wake import WakeCallback, WakeHub
from .workflow import ComposeParams
from .workflow_types import (
    BatchAddParams,
    BatchCreateParams,
    BatchJobsParams,
    BatchRow,
    Composed,
    DependencyRow,
    EdgeRow,
    WorkflowDep,
    WorkflowInsertParams,
    WorkflowNode,
)


def create_storage(url: str, hub: WakeHub, pool_max_size: int = 10, *,
                   virtual_clock: bool = False) -> Storage:
    """Pick the backend for ``url`` without connecting; ``virtual_clock`` (the testing
    toolkit) measures time on the database clock plus a stored offset.

    Example: ``create_storage("sqlite:///jobs.db", WakeHub())``
    """
    storage = _create(url, hub, pool_max_size)
    if virtual_clock:
        storage.use_virtual_clock()
    return storage


def _create(url: str, hub: WakeHub, pool_max_size: int) -> Storage:
    if not isinstance(url, str):
        raise TypeError(f"database URL must be a string, got {type(url).__name__}")
    scheme = urlsplit(url).scheme.lower()
    if scheme == "sqlite":
        from .sqlite import SQLiteConfig, SQLiteStorage

        path = url[len("sqlite:///") :] if url.lower().startswith("sqlite:///") else ""
        if not path:
            raise ValueError(
                f"bad SQLite URL {url!r}: use sqlite:///relative/path.db or sqlite:////abs/path.db"
            )
        return SQLiteStorage(SQLiteConfig(path=path), hub)
    if scheme in ("postgresql", "postgres"):
        try:  # here, not at the top: SQLite-only installs have no psycopg
            from .postgres import PostgresStorage, config_from_url
        except ImportError as exc:
            if exc.name is not None and exc.name.split(".")[0] in ("psycopg", "psycopg_pool"):
                raise DatabaseUnavailableError(MISSING_POSTGRES) from None
            raise
        # ?conveyor_pooler=transaction behind PgBouncer; see postgres/connection.py
        return PostgresStorage(config_from_url(url, pool_max_size), hub)
    raise ValueError(
        f"unsupported database URL {url!r}: expected sqlite:///path.db or postgresql://..."
    )


#: The one line a PostgreSQL URL gets where the ``postgres`` extra is not installed
#: (``import conveyor`` never loads psycopg; the backend is imported by its first URL).
MISSING_POSTGRES = ("PostgreSQL URLs need the psycopg driver, which is not installed: "
                    "pip install 'conveyor[postgres]'")


__all__ = [
    "MISSING_POSTGRES",
    "BaseStorage",
    "BatchAddParams",
    "BatchCreateParams",
    "BatchJobsParams",
    "BatchRow",
    "Capabilities",
    "ComposeParams",
    "Composed",
    "ConcurrencyGroup",
    "DbHealth",
    "DependencyRow",
    "DepthPoint",
    "EdgeRow",
    "FailureGroup",
    "FairKey",
    "FairKeyRow",
    "FairWeightSetParams",
    "InsertRun",
    "JobAck",
    "JobAckManyParams",
    "JobArchiveParams",
    "JobBulkParams",
    "JobChanged",
    "JobClaimOneParams",
    "JobCountCappedParams",
    "JobEdit",
    "JobEditParams",
    "JobExpireParams",
    "JobFailureGroupsParams",
    "JobFetchAvailableParams",
    "JobFilter",
    "JobHeartbeatManyParams",
    "JobHeartbeatResult",
    "JobInsert",
    "JobLease",
    "JobListParams",
    "JobProgress",
    "JobPruneParams",
    "JobPurgeBatch",
    "JobPurgeCount",
    "JobPurgeParams",
    "JobQueueDeleteParams",
    "JobRescueExpiredParams",
    "JobSearchParams",
    "LazyInserts",
    "LeaderElectParams",
    "LeaderResignParams",
    "LeaderRow",
    "LimiterDeclareParams",
    "LimiterHolder",
    "LimiterRow",
    "LimiterSlotParams",
    "MetricPoint",
    "MetricRow",
    "MetricTotal",
    "MetricsSeriesParams",
    "Migration",
    "NodeRow",
    "NodeUpsertParams",
    "QueueCooldownRaiseParams",
    "QueueCooldownRow",
    "QueueRow",
    "QueueUpdateParams",
    "RateGrant",
    "RateRequest",
    "RequiresCount",
    "ScheduleAdvanceParams",
    "ScheduleRow",
    "ScheduleSetPausedParams",
    "ScheduleUpsertParams",
    "StagedJob",
    "StateCount",
    "Storage",
    "TableDeadRows",
    "WakeCallback",
    "WakeHub",
    "WorkflowDep",
    "WorkflowInsertParams",
    "WorkflowNode",
    "create_database",
    "create_storage",
    "drop_database",
    "fast_constructor",
    "insert_with_arguments",
    "keys_ahead",
    "lazy_batches",
    "load_migrations",
    "load_queries",
    "loads",
    "made_batches",
    "make_ack",
    "make_insert",
    "make_job",
    "pending_migrations",
]
