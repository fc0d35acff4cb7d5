"""One attempt in flight (``Execution``): the job, its context, its Task and how it
ended. A module of its own because the worker, the chunker, the heartbeat and the
handoff hold it, and only ``executor.py`` runs it."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from typing import Any, Literal

from .._context import JobContext
from .._job import Job
from .._storage import JobAck

StopReason = Literal["cancel", "shutdown", "lost"]


@dataclasses.dataclass(slots=True)
class Execution:
    """One attempt in flight; the worker may stop it for a cancel, shutdown or lost lease."""

    job: Job
    ctx: JobContext
    task: asyncio.Task[JobAck | None] | None = None
    stop_reason: StopReason | None = None
    handler_is_async: bool = True
    #: Seconds the handler asked its queue to back off (``raise Throttle``), and where:
    #: "node" (this worker's fetch) or "queue" (every worker, through the database).
    throttle: float | None = None
    throttle_scope: str = "node"
    #: The handler returned (with ``result``), even if a stop came in after that.
    returned: bool = False
    result: Any = None
    started: float = dataclasses.field(default_factory=time.monotonic)
    #: Seconds the attempt ran, once it is over.
    run_time: float | None = None
    #: The handler's arguments, decoded from the job's (``call_arguments``).
    args: Sequence[Any] = ()
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)

    def stop(self, reason: StopReason) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        self.ctx._cancel.set()
        # A sync handler's thread cannot be interrupted: it sees ctx.cancelled, and we
        # wait for its return, except at shutdown, where the job is given back at once.
        if self.task is not None and (self.handler_is_async or reason == "shutdown"):
            self.task.cancel()

    def log_extra(self) -> dict[str, Any]:
        j = self.job
        return {"job_id": j.id, "task": j.task, "queue": j.queue, "attempt": j.attempt}
