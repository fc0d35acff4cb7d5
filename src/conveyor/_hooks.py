"""Extension points of an app: middleware around every job execution, listeners of
persisted state changes, and enqueue hooks that may add to a job's ``meta``.

Example::

    @app.add_middleware
    async def timed(job: JobContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
        started = time.monotonic()
        try:
            return await call_next()
        finally:
            print(job.task, time.monotonic() - started)

    @app.on_state_change
    def audit(change: StateChange) -> None:
        print(change.job_id, change.previous, "->", change.state)
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from ._context import JobContext
from ._job import FAILED_STATES, Job, JobState

log = logging.getLogger("conveyor.hooks")

#: ``async def mw(job, call_next) -> result``: call ``call_next()`` once and return
#: (or transform) its result; exceptions, Snooze, Cancel and Discard pass through it.
Middleware = Callable[[JobContext, Callable[[], Awaitable[Any]]], Awaitable[Any]]
#: Called on the event loop that persisted the change: keep it quick.
StateListener = Callable[["StateChange"], None]
#: ``hook(task_name, meta)`` may add JSON values to ``meta`` before the job is written.
EnqueueHook = Callable[[str, dict[str, Any]], None]


@dataclasses.dataclass(frozen=True, slots=True)
class StateChange:
    """One persisted transition of one job.

    ``previous`` is None for an enqueue. ``run_time`` (seconds) and ``node`` are set
    for outcomes written by a worker; ``error`` when the transition recorded one.
    ``source`` names who asked: ``"api"``, ``"cli"``, ``"dashboard"``, a service
    (``"enqueue"``, ``"worker"``, ``"stager"``, ``"rescuer"``, ``"cron"``) or the
    caller's own name (``app.storage_for(source)``).
    ``deleted`` is true when an operator deleted the job's row (``delete_job``,
    ``purge_jobs``, a queue's jobs deleted whole): ``state`` and ``previous`` are then
    both the state it had, so check ``deleted`` before counting transitions. Retention
    (the pruner, ``prune_now``) deletes without events.
    """

    job_id: int
    task: str
    queue: str
    attempt: int
    state: JobState
    previous: JobState | None
    source: str
    error: str | None = None
    run_time: float | None = None
    node: str | None = None
    deleted: bool = False


class Hooks:
    """The registry behind ``app.add_middleware``, ``app.on_state_change`` and
    ``app.hooks.add_enqueue_hook``. Registration is for start-up, before workers run."""

    def __init__(self) -> None:
        self.middleware: list[Middleware] = []
        self.listeners: list[StateListener] = []
        self.enqueue_hooks: list[EnqueueHook] = []
        #: Integrations installed on this app (``"sentry"``, ``"otel"``): installing
        #: one twice would report or trace every attempt twice.
        self.integrations: set[str] = set()

    def add_middleware(self, middleware: Middleware) -> Middleware:
        """The first added is the outermost."""
        self.middleware.append(middleware)
        return middleware

    def add_listener(self, listener: StateListener) -> StateListener:
        self.listeners.append(listener)
        return listener

    def add_enqueue_hook(self, hook: EnqueueHook) -> EnqueueHook:
        self.enqueue_hooks.append(hook)
        return hook

    # -- used by the runtime ----------------------------------------------------------------

    async def run(self, ctx: JobContext, call: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``call`` inside every middleware, outermost first."""
        chain = self.middleware
        if not chain:
            return await call()

        async def at(i: int) -> Any:
            if i == len(chain):
                return await call()
            return await chain[i](ctx, lambda: at(i + 1))

        return await at(0)

    def emit(self, changes: Iterable[StateChange]) -> None:
        """Tell every listener; a failing listener is logged, never raised."""
        for change in changes:
            for listener in self.listeners:
                try:
                    listener(change)
                except Exception:
                    log.exception("state-change listener %r failed", listener)

    def emit_jobs(self, jobs: Sequence[Job], previous: JobState | None, source: str) -> None:
        """Emit the change each job (as persisted) just went through."""
        if self.listeners:
            self.emit(job_change(job, previous, source) for job in jobs)

    def changed(self, job: Job | None, previous: JobState | None, source: str) -> None:
        """An API change returned ``job``; emit it if its state really changed."""
        if job is not None and self.listeners and job.state != previous:
            self.emit([job_change(job, previous, source)])

    def prepare_meta(self, task: str, meta_json: str) -> str:
        """Let enqueue hooks add to a job's meta (it stays JSON); runs only if any."""
        meta = json.loads(meta_json)
        for hook in self.enqueue_hooks:
            hook(task, meta)
        return json.dumps(meta, separators=(",", ":"))


def job_change(job: Job, previous: JobState | None, source: str) -> StateChange:
    error = str(job.errors[-1].get("error")) if job.errors and previous is not None else None
    return StateChange(job.id, job.task, job.queue, job.attempt, job.state, previous, source,
                       error=error if job.state in FAILED_STATES
                       else None)
