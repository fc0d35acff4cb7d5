"""Configuration dataclasses: one for the app, one for a worker."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

DEFAULT_URL = "sqlite:///conveyor.db"


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


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Settings of one worker process.

    Example: ``await app.run_worker(config=WorkerConfig(queues={"mail": 5}, burst=True))``
    """

    queues: Mapping[str, int] = dataclasses.field(default_factory=lambda: {"default": 10})
    #: A claimed job belongs to this worker until now + lease_ttl; heartbeats extend it.
    lease_ttl: float = 30.0
    #: Also how fast a cancel reaches a running job on another process.
    heartbeat_interval: float = 2.0
    rescue_interval: float = 5.0
    stage_interval: float = 0.5
    shutdown_timeout: float = 30.0
    #: Exit once every queue is empty and nothing runs.
    burst: bool = False
    #: Threads for sync handlers; defaults to the total concurrency.
    sync_threads: int | None = None
    #: Largest number of jobs claimed in one round trip.
    fetch_limit: int = 500
    #: A node silent for this long is dead: its jobs are rescued, its share rebalanced.
    node_ttl: float = 15.0
    #: The leader's lease; a dead leader is replaced within it.
    leader_ttl: float = 15.0
    cron_interval: float = 1.0
    #: How often queue settings (pause, concurrency, rate) are read from the database.
    settings_interval: float = 1.0
    prune_interval: float = 60.0
    #: Completed and cancelled jobs are deleted after this many seconds.
    completed_retention: float = 86_400.0
    #: Discarded jobs are kept longer, for inspection and manual retry.
    discarded_retention: float = 7 * 86_400.0
    #: Per-minute metric rollups (dashboard charts) are kept this long; 0 turns them off.
    metrics_retention: float = 7 * 86_400.0
    metrics_interval: float = 5.0

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
