"""Params and rows of the cluster-control methods of the storage protocol: queues,
nodes, leadership, schedules, rate and concurrency limits, retention."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Any


@dataclasses.dataclass(frozen=True, slots=True)
class QueueRow:
    name: str
    paused: bool
    concurrency: int | None
    scope: str
    rate_limit: str | None
    updated_at: datetime
    #: The queue's default backoff spec ('30', 'exp:5:3600'), for tasks that set none.
    backoff: str | None = None
    #: Seconds finished jobs of this queue are kept; None: the pruning worker's setting.
    completed_retention: float | None = None
    discarded_retention: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class QueueUpdateParams:
    """Upsert one queue; only the fields whose ``set_*`` flag is true change."""

    name: str
    paused: bool | None = None
    concurrency: int | None = None
    scope: str | None = None
    rate_limit: str | None = None
    backoff: str | None = None
    completed_retention: float | None = None
    discarded_retention: float | None = None
    set_paused: bool = False
    set_concurrency: bool = False
    set_rate_limit: bool = False
    set_backoff: bool = False
    set_completed_retention: bool = False
    set_discarded_retention: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class NodeRow:
    id: str
    hostname: str
    pid: int
    queues: dict[str, int]
    tasks: list[str]
    started_at: datetime
    heartbeat_at: datetime
    #: Seconds after its last heartbeat at which the node counts as gone.
    ttl: float
    alive: bool
    #: Operator labels of the worker (``--label k=v``, ``CONVEYOR_WORKER_LABELS``).
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    #: The app's version the worker runs (``Conveyor(version=...)``, ``CONVEYOR_APP_VERSION``).
    version: str | None = None
    #: The tasks it claims (``--tasks``); None: every task it knows (``tasks``).
    serves: list[str] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class NodeUpsertParams:
    id: str
    hostname: str
    pid: int
    queues_json: str
    tasks_json: str = "[]"
    labels_json: str = "{}"
    version: str | None = None
    #: The tasks it claims, a JSON array (``--tasks``); None: every task it knows.
    serves_json: str | None = None
    #: The node counts as alive while its last heartbeat is younger than this (the
    #: worker's ``WorkerConfig.node_ttl``: each node is judged by its own setting).
    ttl: float = dataclasses.field(kw_only=True)


@dataclasses.dataclass(frozen=True, slots=True)
class LeaderRow:
    name: str
    node_id: str
    term: int
    elected_at: datetime
    expires_at: datetime


@dataclasses.dataclass(frozen=True, slots=True)
class LeaderElectParams:
    node_id: str
    ttl: float
    name: str = "leader"


@dataclasses.dataclass(frozen=True, slots=True)
class LeaderResignParams:
    node_id: str
    name: str = "leader"


@dataclasses.dataclass(frozen=True, slots=True)
class ScheduleRow:
    name: str
    task: str
    cron: str
    timezone: str
    args: list[Any]
    kwargs: dict[str, Any]
    queue: str | None
    priority: int | None
    misfire: str
    backfill: int
    paused: bool
    last_tick: datetime | None
    last_job_id: int | None
    created_at: datetime


@dataclasses.dataclass(frozen=True, slots=True)
class ScheduleUpsertParams:
    name: str
    task: str
    cron: str
    timezone: str
    args_json: str
    kwargs_json: str
    queue: str | None
    priority: int | None
    misfire: str
    backfill: int


@dataclasses.dataclass(frozen=True, slots=True)
class ScheduleSetPausedParams:
    name: str
    paused: bool


@dataclasses.dataclass(frozen=True, slots=True)
class ScheduleAdvanceParams:
    name: str
    tick: datetime
    job_id: int | None


@dataclasses.dataclass(frozen=True, slots=True)
class RateRequest:
    """Ask for ``count`` starts under a GCRA limit of one start per ``interval`` seconds
    with a burst of ``burst``."""

    key: str
    interval: float
    burst: int
    count: int


@dataclasses.dataclass(frozen=True, slots=True)
class RateGrant:
    granted: int
    #: Seconds until the next start would be allowed (0 when all were granted).
    wait: float


@dataclasses.dataclass(frozen=True, slots=True)
class ConcurrencyGroup:
    key: str
    limit: int
    #: (job id, lease token) of running jobs asking for a slot, in claim order.
    leases: Sequence[tuple[int, int]]


@dataclasses.dataclass(frozen=True, slots=True)
class JobPruneParams:
    completed_age: float
    discarded_age: float
    limit: int = 1000
    #: Nodes silent for this long (and past their own ttl) are deleted.
    node_age: float = 3600.0
    #: Only this queue's jobs (a pass with the queue's own retention); None: every queue
    #: but those named in ``exclude_queues``.
    queue: str | None = None
    #: Queues left to their own passes (they have a retention of their own).
    exclude_queues: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class FairKeyRow:
    """A fair key of a queue: its waiting (available) jobs, weight and virtual time."""

    queue: str
    key: str
    waiting: int
    weight: float
    vtime: float


@dataclasses.dataclass(frozen=True, slots=True)
class FairWeightSetParams:
    """A fair key's weight in a queue (``app.set_fair_weight``)."""

    queue: str
    key: str
    weight: float
