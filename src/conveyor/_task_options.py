"""A task's options: its defaults (``@app.task(...)``: ``TaskOptions``) and one
enqueue's overrides (``task.options(...)``: ``EnqueueOptions``), with the check of
expiry options the two share."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from . import _payload
from ._chunk import Chunk
from ._limits import KeyFunc, RateLimit, Unique
from ._task_retry import AnyBackoff, ExceptionTypes


@dataclasses.dataclass(frozen=True, slots=True)
class TaskOptions:
    """Per-task defaults, set by ``@app.task(...)``."""

    name: str
    queue: str = "default"
    priority: int = 0
    max_attempts: int = 20
    timeout: float | None = None
    #: Seconds, ``callable(attempt)`` or ``callable(attempt, exc)``; None: the queue's
    #: default backoff (``app.set_queue_backoff``), else the built-in one.
    backoff: AnyBackoff | None = None
    tags: tuple[str, ...] = ()
    unique: Unique | None = None
    rate_limit: RateLimit | None = None
    #: Cluster-wide cap on running jobs of this task (per concurrency_key when given).
    concurrency: int | None = None
    concurrency_key: KeyFunc | None = None
    #: Only these exception types retry; any other failure discards the job at once.
    retry_on: ExceptionTypes = ()
    #: These exception types discard the job at once (they win over ``retry_on``).
    discard_on: ExceptionTypes = ()
    #: ``backoff`` is ``callable(attempt, exc)`` (read from its signature at definition).
    backoff_takes_exception: bool = False
    #: Seal the arguments at rest with CONVEYOR_ENCRYPTION_KEYS (docs/arguments.md).
    encrypt: bool = False
    #: Run the jobs in chunks: the handler takes a list of ``ChunkJob`` (conveyor._chunk).
    chunk: Chunk | None = None
    #: Worker labels a job of this task requires (docs/flow-control.md); None: any worker.
    requires: Mapping[str, str] | None = None
    #: Seconds after its enqueue past which a job not started never runs (it ends
    #: ``cancelled``, reason "expired"); None: jobs do not expire (docs/flow-control.md).
    expires_in: float | None = None
    #: The job's fair key, from its arguments (docs/flow-control.md "Fair keys").
    fair_key: KeyFunc | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class EnqueueOptions:
    """Per-enqueue overrides, set by ``task.options(...)``."""

    queue: str | None = None
    priority: int | None = None
    delay: float | None = None
    run_at: datetime | None = None
    max_attempts: int | None = None
    tags: Sequence[str] | None = None
    meta: Mapping[str, Any] | None = None
    connection: Any = None
    unique_key: str | None = None
    #: Ids of the jobs this one waits on (state ``pending`` until they are final), and
    #: what it does when one of them ends discarded or cancelled (docs/workflows.md).
    depends_on: tuple[int, ...] = ()
    on_failure: str = "cancel"
    #: Worker labels this job requires instead of the task's (``{}``: none); None: the
    #: task's own.
    requires: Mapping[str, str] | None = None
    #: The job expires this many seconds after its enqueue, or at this moment (one of
    #: them; either overrides the task's ``expires_in``).
    expires_in: float | None = None
    expires_at: datetime | None = None
    #: This job's fair key (wins over the task's ``fair_key=`` function).
    fair_key: str | None = None



def check_expiry(delay: float | None, run_at: datetime | None, expires_in: object,
                 expires_at: object) -> tuple[float | None, datetime | None]:
    """Checked expiry options; refuses both at once, and an expiry that comes before the
    job is due (it could never run)."""
    if expires_in is not None and expires_at is not None:
        raise ValueError("give expires_in= or expires_at=, not both")
    seconds, moment = _payload.check_expires_in(expires_in), _payload.check_expires_at(expires_at)
    if seconds is not None and delay is not None and delay >= seconds:
        raise ValueError(f"expires_in={seconds:g} is not after delay={delay:g}: the job would "
                         "expire before it is due")
    if moment is not None and run_at is not None and run_at >= moment:
        raise ValueError("expires_at is not after run_at: the job would expire before it is due")
    return seconds, moment
