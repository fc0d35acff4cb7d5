"""Configuration dataclasses: one for the app, one for a worker."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import TypeVar

DEFAULT_URL = "sqlite:///conveyor.db"
T = TypeVar("T")


def _field(default: T, help_text: str) -> T:
    """A worker setting with its one-line help (read by the CLI)."""
    return dataclasses.field(default=default, metadata={"help": help_text})


def url_from_env() -> str:
    return os.environ.get("CONVEYOR_URL") or DEFAULT_URL


@dataclasses.dataclass(frozen=True, slots=True)
class ConveyorConfig:
    """Settings of a Conveyor app.

    Example: ``Conveyor("sqlite:///jobs.db", config=ConveyorConfig(max_payload_bytes=65536))``
    """

    #: Cap on the JSON of a job's args + kwargs; larger payloads are refused at enqueue.
    max_payload_bytes: int = 1024 * 1024
    #: Cap on a stored result; larger results are replaced by a note saying so.
    max_result_bytes: int = 64 * 1024
    #: Cap on a stored error message and on a stored traceback, per attempt.
    max_error_chars: int = 4_000
    max_traceback_chars: int = 16_000
    #: Largest batch a single enqueue_many call may carry.
    max_batch: int = 10_000
    #: PostgreSQL connection pool size of this process.
    pool_max_size: int = 10


class UnsetQueues(dict[str, int]):
    """``WorkerConfig.queues`` when nobody set it (``{"default": 10}``): ``app.run_worker``
    then serves every queue the app's tasks and schedules name. A dict given explicitly,
    even an equal one, is served as given."""


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Settings of one worker process.

    Example: ``await app.run_worker(config=WorkerConfig(queues={"mail": 5}, burst=True))``

    Every field has a one-line ``metadata["help"]``: ``conveyor worker`` makes its flags
    from ``dataclasses.fields(WorkerConfig)``.
    """

    queues: Mapping[str, int] = dataclasses.field(
        default_factory=lambda: UnsetQueues(default=10),
        metadata={"help": "queues to serve, each with its concurrency (name=N)"},
    )
    #: A claimed job belongs to this worker until now + lease_ttl; heartbeats extend it.
    lease_ttl: float = _field(30.0, "seconds a claimed job belongs to this worker; heartbeats extend it")
    #: Also how fast a cancel reaches a running job on another process.
    heartbeat_interval: float = _field(
        2.0, "seconds between heartbeats; also how fast a cancel reaches a job")
    rescue_interval: float = _field(
        5.0, "seconds between passes returning jobs of dead workers to their queue")
    stage_interval: float = _field(
        0.5, "seconds between passes making due scheduled and retryable jobs available")
    shutdown_timeout: float = _field(
        30.0, "seconds running jobs get to finish at shutdown before being given back")
    #: Exit once every queue is empty and nothing runs.
    burst: bool = _field(False, "exit once every queue is empty and nothing runs")
    #: Threads for sync handlers; defaults to the total concurrency.
    sync_threads: int | None = _field(None, "threads for sync handlers (default: the total concurrency)")
    #: Largest number of jobs claimed in one round trip.
    fetch_limit: int = _field(500, "largest number of jobs claimed in one round trip")
    #: A node silent for this long is dead: its jobs are rescued, its share rebalanced.
    node_ttl: float = _field(15.0, "seconds of silence after which this node counts as dead")
    #: The leader's lease; a dead leader is replaced within it.
    leader_ttl: float = _field(15.0, "seconds of the leader's lease; a dead leader is replaced within it")
    cron_interval: float = _field(1.0, "seconds between passes of the cron scheduler (on the leader)")
    #: How often queue settings (pause, concurrency, rate) are read from the database.
    settings_interval: float = _field(1.0, "seconds between reads of live queue settings (pause, limits)")
    prune_interval: float = _field(60.0, "seconds between passes of the pruner (on the leader)")
    #: Completed and cancelled jobs are deleted after this many seconds.
    completed_retention: float = _field(86_400.0, "seconds completed and cancelled jobs are kept")
    #: Discarded jobs are kept longer, for inspection and manual retry.
    discarded_retention: float = _field(7 * 86_400.0, "seconds discarded jobs are kept")
    #: Per-minute metric rollups (dashboard charts) are kept this long; 0 turns them off.
    metrics_retention: float = _field(
        7 * 86_400.0, "seconds per-minute metric rollups are kept; 0 turns them off")
    metrics_interval: float = _field(5.0, "seconds between metric flushes")
    #: A job of a task this worker does not know goes back (no attempt used) until no
    #: worker that knows it took it for this long; then it is discarded. 0: at once.
    unknown_task_timeout: float = _field(
        3600.0, "seconds a job of a task no worker knows keeps waiting for one that does "
                "(rolling deploys) before it is discarded; 0 discards at once")

    def __post_init__(self) -> None:
        if not self.queues:
            raise ValueError("a worker needs at least one queue")
        for name, limit in self.queues.items():
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise ValueError(f"concurrency of queue {name!r} must be an int >= 1")
        if self.heartbeat_interval <= 0 or self.lease_ttl <= self.heartbeat_interval:
            raise ValueError("lease_ttl must be longer than heartbeat_interval (> 0)")
        if self.shutdown_timeout < 0:
            raise ValueError("shutdown_timeout must be >= 0")
        if not 0 <= self.unknown_task_timeout < float("inf"):
            raise ValueError("unknown_task_timeout must be a finite number of seconds >= 0")
