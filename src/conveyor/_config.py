"""Configuration dataclasses: one for the app, one for a worker."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

DEFAULT_URL = "sqlite:///conveyor.db"
#: What a supervised worker child finds in its environment, set by ``conveyor worker``'s
#: supervisor (cli._supervisor) and read by the child (_runtime.hardlimit, .handoff): its
#: watchdog pipe's file descriptor, and the handoff file's of the child it replaces.
WATCHDOG_ENV = "CONVEYOR_WATCHDOG_FD"
HANDOFF_ENV = "CONVEYOR_WATCHDOG_HANDOFF"
T = TypeVar("T")


def _field(default: T, help_text: str) -> T:
    """A worker setting with its one-line help (read by the CLI)."""
    return dataclasses.field(default=default, metadata={"help": help_text})


def url_from_env() -> str:
    return os.environ.get("CONVEYOR_URL") or DEFAULT_URL


_LABEL_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-/]{0,62}")


def check_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """Worker labels: keys of letters, digits and ``_.-/`` (up to 63), string values up
    to 200 characters; a clear error for anything else."""
    if not isinstance(labels, Mapping):
        raise TypeError(f"labels must be a mapping of str to str, got {type(labels).__name__}")
    out: dict[str, str] = {}
    for key, value in labels.items():
        if not isinstance(key, str) or not _LABEL_KEY.fullmatch(key):
            raise ValueError(f"label key {key!r} must be 1-63 letters, digits or _.-/ "
                             "(starting with a letter or digit)")
        if not isinstance(value, str) or len(value) > 200:
            raise ValueError(f"label {key!r} must have a string value of at most 200 characters")
        out[key] = value
    return out


def parse_labels(specs: Iterable[str], source: str = "--label") -> dict[str, str]:
    """``["region=eu", "tier=gold"]`` -> ``{"region": "eu", "tier": "gold"}``."""
    labels: dict[str, str] = {}
    for spec in specs:
        key, sep, value = spec.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{source}: expected KEY=VALUE, got {spec!r}")
        labels[key.strip()] = value.strip()
    return check_labels(labels)


def labels_from_env() -> dict[str, str]:
    """``CONVEYOR_WORKER_LABELS="region=eu,tier=gold"``; empty when unset."""
    text = os.environ.get("CONVEYOR_WORKER_LABELS", "")
    return parse_labels([p for p in text.split(",") if p.strip()], "CONVEYOR_WORKER_LABELS")


def app_version_from_env() -> str | None:
    """``CONVEYOR_APP_VERSION`` (e.g. a git sha set by the deploy), or None."""
    return os.environ.get("CONVEYOR_APP_VERSION") or None


def check_version(version: str | None) -> str | None:
    if version is not None and (not isinstance(version, str) or not 0 < len(version) <= 100):
        raise ValueError(f"version must be a string of 1-100 characters, got {version!r}")
    return version


#: The queue spec that means "every queue this app's tasks and schedules name".
ALL_QUEUES = "*"


def parse_queue_specs(text: str, default_concurrency: int, source: str,
                      app_queues: Iterable[str] = ()) -> dict[str, int]:
    """``"default=10,emails=5"`` -> ``{"default": 10, "emails": 5}``. ``name:N`` works
    too; a bare ``name`` gets ``default_concurrency``; ``*`` (or ``*=N``) stands for
    every name in ``app_queues``. ``source`` names the input in errors."""
    queues: dict[str, int] = {}
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        name, sep, limit = entry.replace(":", "=", 1).partition("=")
        name = name.strip()
        if not name:
            raise ValueError(f"{source}: empty queue name in {entry!r} "
                             "(expected NAME=N,NAME2=N, e.g. default=10,emails=5)")
        value = default_concurrency
        if sep:
            try:
                value = int(limit.strip())
            except ValueError:
                value = 0
            if value < 1:
                raise ValueError(f"{source}: concurrency of {name!r} must be an int >= 1, "
                                 f"got {limit.strip()!r}")
        if name == ALL_QUEUES:  # a queue named on its own keeps its own concurrency
            for one in app_queues:
                queues.setdefault(one, value)
        else:
            queues[name] = value
    if not queues:
        raise ValueError(f"{source}: no queue named in {text!r} "
                         "(expected NAME=N,NAME2=N, e.g. default=10,emails=5)")
    return queues


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
    #: Most jobs per transaction of enqueue_many (a longer list is split, each batch
    #: committed on its own) and per shared batch of concurrent enqueue_async calls.
    max_batch: int = 10_000
    #: PostgreSQL connection pool size of this process.
    pool_max_size: int = 10
    #: The app's version (e.g. a git sha), recorded with every worker node and shown by
    #: ``conveyor status``, the dashboard and ``explain_job``; default $CONVEYOR_APP_VERSION.
    version: str | None = dataclasses.field(default_factory=app_version_from_env)

    def __post_init__(self) -> None:
        check_version(self.version)


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
    progress_interval: float = _field(
        0.5, "seconds between writes of running jobs' progress (set_progress, update_meta)")
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
    #: Waiting jobs past their expires_at end cancelled (a claimed one at admission).
    expire_interval: float = _field(
        1.0, "seconds between passes of the expirer, which cancels expired jobs (on the leader)")
    #: Completed and cancelled jobs are deleted after this many seconds.
    completed_retention: float = _field(86_400.0, "seconds completed and cancelled jobs are kept")
    #: Discarded jobs are kept longer, for inspection and manual retry.
    discarded_retention: float = _field(7 * 86_400.0, "seconds discarded jobs are kept")
    #: Finished jobs move from the hot table to history (the archiver, on the leader);
    #: reads see both tables, so this only decides how long they stay hot.
    archive_after: float = _field(
        0.0, "seconds a finished job stays in the hot table before it moves to history")
    archive_interval: float = _field(
        1.0, "seconds between passes of the archiver (on the leader)")
    #: PostgreSQL: the leader VACUUMs a Conveyor table whose dead rows pass this bound
    #: (autovacuum visits a database only once a minute by default); 0 leaves it to
    #: autovacuum.
    vacuum_dead_rows: int = _field(
        50_000, "dead rows after which the leader VACUUMs a Conveyor table (PostgreSQL); "
                "0 leaves them to autovacuum")
    vacuum_interval: float = _field(
        5.0, "seconds between the leader's reads of its tables' dead rows (PostgreSQL)")
    #: Per-minute metric rollups (dashboard charts) are kept this long; 0 turns them off.
    metrics_retention: float = _field(
        7 * 86_400.0, "seconds per-minute metric rollups are kept; 0 turns them off")
    metrics_interval: float = _field(5.0, "seconds between metric flushes")
    #: Operator labels of this worker (region, tier ...), shown with its node; default
    #: $CONVEYOR_WORKER_LABELS ("k=v,k2=v2").
    labels: Mapping[str, str] = dataclasses.field(
        default_factory=labels_from_env,
        metadata={"help": "labels of this worker (KEY=VALUE), shown with its node"},
    )
    #: Only jobs of these tasks are claimed (``--tasks send_email,resize``); the others
    #: stay for other workers. None: every task. Checked against the app's tasks when
    #: the worker starts.
    tasks: Sequence[str] | None = dataclasses.field(
        default=None,
        metadata={"help": "only claim jobs of these tasks (NAME,NAME); default: every task"},
    )
    #: A job of a task this worker does not know goes back (no attempt used) until no
    #: worker that knows it took it for this long; then it is discarded. 0: at once.
    unknown_task_timeout: float = _field(
        3600.0, "seconds a job of a task no worker knows keeps waiting for one that does "
                "(rolling deploys) before it is discarded; 0 discards at once")

    #: Recycling (see docs/scaling.md): the worker stops claiming once it finished this
    #: many jobs, drains as on SIGTERM and ``run_worker`` returns why; the CLI's supervisor
    #: starts a replacement process. None: never.
    max_jobs_per_child: int | None = _field(
        None, "jobs a worker process finishes before it drains and is replaced (recycled); "
              "runs the worker under the supervisor (see --processes)")
    #: The same bound on the process's own resident memory (bytes), checked every
    #: couple of seconds.
    max_memory_per_child: int | None = _field(
        None, "resident memory of a worker process after which it drains and is replaced")
    #: Hard time limit: a sync handler still running this many seconds past its task's
    #: ``timeout`` (its attempt already failed with the timeout) gets its process
    #: recycled at once: the other running jobs go back without using an attempt and the
    #: process exits, which ends the stuck thread. Under the supervisor, a process too
    #: wedged to do so (C code holding the GIL) is killed, and its replacement fails the
    #: stuck attempt and gives the others back the same way (``_runtime/handoff.py``).
    #: None: threads run on (soft limit only).
    hard_timeout_grace: float | None = _field(
        None, "seconds a sync handler may run past its timeout before its worker process "
              "is replaced, ending it (a hard time limit); runs under the supervisor")

    def __post_init__(self) -> None:
        if not self.queues:
            raise ValueError("a worker needs at least one queue")
        for name, limit in self.queues.items():
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise ValueError(f"concurrency of queue {name!r} must be an int >= 1")
        if self.heartbeat_interval <= 0 or self.lease_ttl <= self.heartbeat_interval:
            raise ValueError("lease_ttl must be longer than heartbeat_interval (> 0)")
        if not 0 < self.progress_interval < float("inf"):
            raise ValueError("progress_interval must be a number of seconds > 0")
        if self.shutdown_timeout < 0:
            raise ValueError("shutdown_timeout must be >= 0")
        check_labels(self.labels)
        if self.tasks is not None:
            if isinstance(self.tasks, str) or not isinstance(self.tasks, Sequence | set | frozenset):
                raise TypeError("tasks must be a list of task names (or None: every task)")
            if not self.tasks or not all(isinstance(t, str) and t for t in self.tasks):
                raise ValueError("tasks must name at least one task, each a non-empty string")
        if not 0 <= self.unknown_task_timeout < float("inf"):
            raise ValueError("unknown_task_timeout must be a finite number of seconds >= 0")
        if not 0 <= self.archive_after < float("inf"):
            raise ValueError("archive_after must be a finite number of seconds >= 0")
        if not 0 < self.archive_interval < float("inf"):
            raise ValueError("archive_interval must be a finite number of seconds > 0")
        if not 0 < self.vacuum_interval < float("inf"):
            raise ValueError("vacuum_interval must be a finite number of seconds > 0")
        for name in ("max_jobs_per_child", "max_memory_per_child"):
            bound = getattr(self, name)
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int)
                                      or bound < 1):
                raise ValueError(f"{name} must be an int >= 1 (or None)")
        if self.hard_timeout_grace is not None and not 0 < self.hard_timeout_grace < float("inf"):
            raise ValueError("hard_timeout_grace must be a finite number of seconds > 0")
        if (isinstance(self.vacuum_dead_rows, bool) or not isinstance(self.vacuum_dead_rows, int)
                or self.vacuum_dead_rows < 0):
            raise ValueError("vacuum_dead_rows must be an int >= 0")
