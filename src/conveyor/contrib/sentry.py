"""Sentry: job failures as Sentry events, and Sentry Crons check-ins for periodic jobs.

Example::

    import sentry_sdk
    from conveyor.contrib.sentry import install

    sentry_sdk.init(dsn="https://...")      # your usual init, in the module that defines app
    install(app)                            # once, before workers start

Every worker process (``conveyor worker --processes N`` starts N) imports the module
that defines ``app``, so both lines run in each of them.

A handler that raises is reported with its own exception and traceback, tagged with the
job's ``conveyor.job_id``, ``conveyor.task``, ``conveyor.queue`` and ``conveyor.attempt``
(and ``conveyor.final``), with a ``conveyor_job`` context holding the arguments as
Conveyor's redactor shows them, the worker node and the schedule tick. With
``failures="final"`` (the default) only the attempt that discards the job is reported;
with ``failures="attempt"`` every failed attempt is. ``Snooze``, ``Throttle``,
``Cancel`` and ``Discard`` are outcomes a handler chooses, never errors, and a job
stopped by a shutdown, a lost lease or ``app.cancel_job`` is not an error either.

Jobs of ``@app.periodic`` schedules also send Sentry Crons check-ins: ``in_progress``
when an attempt starts, then ``ok`` or ``error`` with its duration. The monitor's slug
is the schedule's name and its config (crontab, time zone, max runtime) comes from the
schedule, so Sentry creates the monitor on the first check-in. Needs ``sentry-sdk``:
``pip install 'conveyor[sentry]'``.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal, cast

from .._errors import Cancel, Discard, Snooze, TaskTimedOut, Throttle
from .._redact import Redactor, redact_secrets

try:
    import sentry_sdk
    from sentry_sdk.crons import MonitorStatus, capture_checkin
    from sentry_sdk.utils import capture_internal_exceptions, event_from_exception
except ImportError:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "conveyor.contrib.sentry needs sentry-sdk: pip install 'conveyor[sentry]'") from None

if TYPE_CHECKING:
    from .._app import Conveyor
    from .._context import JobContext
    from .._job import Job

Failures = Literal["final", "attempt"]
#: Check-in ids are derived from the job and attempt: the same attempt resumed after a
#: snooze or a shutdown (which use no attempt) continues its check-in on any worker.
_CHECKIN_NAMESPACE = uuid.UUID("8c1d5a0e-3f7b-4b8e-9a57-6c0f8d2e4a11")
#: Fields made of numbers, ``*``, lists, ranges and steps: what every cron dialect
#: reads the same way (no ``L``, ``W``, ``#``, ``?`` or names).
_PORTABLE_FIELD = re.compile(r"(\*|\d+(-\d+)?)(/\d+)?(,(\*|\d+(-\d+)?)(/\d+)?)*")
_SLUG = re.compile(r"[^a-z0-9_-]+")
#: How long a schedule read from the database (not defined in code) is trusted.
_SCHEDULE_TTL = 60.0
#: Seconds that lookup may delay the job before its check-in goes without a config.
_LOOKUP_TIMEOUT = 2.0


def install(app: Conveyor, *, failures: Failures = "final", monitor_schedules: bool = True,
            include_args: bool = True, redact: Redactor = redact_secrets,
            monitor_config: dict[str, Any] | None = None) -> None:
    """Report ``app``'s job failures and periodic check-ins to Sentry (idempotent).

    ``failures``: ``"final"`` reports the attempt that discards a job (its last one),
    ``"attempt"`` every failed attempt. ``include_args=False`` leaves arguments out
    of the event; ``redact`` is the redactor applied to them otherwise (the
    dashboard's default, ``redact_secrets``). ``monitor_config`` is merged into each
    monitor's config (e.g. ``{"checkin_margin": 5, "failure_issue_threshold": 2}``).
    """
    if failures not in ("final", "attempt"):
        raise ValueError(f"failures must be 'final' or 'attempt', got {failures!r}")
    if "sentry" in app.hooks.integrations:
        return
    reporter = _Reporter(app, failures, monitor_schedules, include_args, redact,
                         dict(monitor_config or {}))
    app.add_middleware(reporter.middleware)
    app.hooks.integrations.add("sentry")


class _Reporter:
    """The middleware behind ``install``: one isolation scope per attempt."""

    def __init__(self, app: Conveyor, failures: Failures, monitor_schedules: bool,
                 include_args: bool, redact: Redactor, monitor_config: dict[str, Any]) -> None:
        self.app = app
        self.failures = failures
        self.monitor_schedules = monitor_schedules
        self.include_args = include_args
        self.redact = redact
        self.monitor_config = monitor_config
        self._stored: dict[str, tuple[float, tuple[str, str] | None]] = {}

    async def middleware(self, ctx: JobContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
        if not sentry_sdk.get_client().is_active():
            return await call_next()  # sentry_sdk.init was not called (or had no DSN)
        checkin = await self._checkin_start(ctx) if self.monitor_schedules else None
        started = time.monotonic()
        status: str | None = MonitorStatus.ERROR
        with sentry_sdk.isolation_scope() as scope:
            with capture_internal_exceptions():  # a failing redactor never fails the job
                scope.clear_breadcrumbs()
                scope.set_transaction_name(ctx.task, source="task")
                self._tag(scope, ctx)
            try:
                result = await call_next()
                # A sync handler that returns after being stopped: the worker records a
                # cancel or gives the job back, as it does for async ones (left open).
                status = None if ctx.cancelled else MonitorStatus.OK
                return result
            except (Snooze, Throttle):
                status = None  # the same attempt runs again later: its check-in stays open
                raise
            except Cancel:
                status = MonitorStatus.OK  # the handler chose to end the job
                raise
            except Discard:
                raise  # ends the job failed: an error check-in, but no event
            except asyncio.CancelledError as exc:
                if _stopped(ctx):
                    status = None  # shutdown, lost lease or app.cancel_job: not an error
                else:
                    self._report(ctx, exc)
                raise
            except BaseException as exc:
                self._report(ctx, exc)
                raise
            finally:
                if checkin is not None and status is not None:
                    self._checkin_end(checkin, status, time.monotonic() - started)

    # -- events --------------------------------------------------------------------------

    def _tag(self, scope: Any, ctx: JobContext) -> None:
        job = ctx.job
        final = job.attempt >= job.max_attempts
        scope.set_tag("conveyor.job_id", str(job.id))
        scope.set_tag("conveyor.task", job.task)
        scope.set_tag("conveyor.queue", job.queue)
        scope.set_tag("conveyor.attempt", str(job.attempt))
        scope.set_tag("conveyor.final", "true" if final else "false")
        schedule = _schedule_of(job)
        if schedule is not None:
            scope.set_tag("conveyor.schedule", schedule)
        scope.set_context("conveyor_job", self._context(job))

    def _context(self, job: Job) -> dict[str, Any]:
        context: dict[str, Any] = {
            "id": job.id, "task": job.task, "queue": job.queue, "attempt": job.attempt,
            "max_attempts": job.max_attempts, "priority": job.priority,
            "node": job.lease_owner, "created_at": job.created_at.isoformat(),
            "scheduled_at": job.scheduled_at.isoformat(), "tags": list(job.tags),
        }
        if self.include_args:
            shown = self.redact(job)
            context.update(args=shown.args, kwargs=shown.kwargs, meta=shown.meta)
        return context

    def _report(self, ctx: JobContext, exc: BaseException) -> None:
        """One event for this failed attempt, unless only final failures are wanted
        and the job has attempts left (the executor's own rule for discarding)."""
        job = ctx.job
        if self.failures == "final" and job.attempt < job.max_attempts:
            return
        with capture_internal_exceptions():
            client = sentry_sdk.get_client()
            event, hint = event_from_exception(
                exc, client_options=client.options,
                mechanism={"type": "conveyor", "handled": False})
            if isinstance(exc, TaskTimedOut):
                task = self.app.tasks.get(job.task)
                timeout = task.defaults.timeout if task is not None else None
                event["message"] = f"task {job.task!r} ran past its timeout of {timeout}s"
                event["fingerprint"] = ["conveyor", "timeout", job.task]
            _hide_internals(cast(dict[str, Any], event))
            sentry_sdk.capture_event(event, hint=hint)

    # -- check-ins -----------------------------------------------------------------------

    async def _checkin_start(self, ctx: JobContext) -> tuple[str, str, dict[str, Any]] | None:
        job = ctx.job
        name = _schedule_of(job)
        if name is None or not isinstance(job.meta.get("tick"), str):
            return None  # not a tick of a schedule (a manual run is not monitored)
        with capture_internal_exceptions():
            config = self._config(job, await self._cron_of(name))
            checkin_id = uuid.uuid5(_CHECKIN_NAMESPACE, f"{job.id}:{job.attempt}").hex
            slug = monitor_slug(name)
            capture_checkin(monitor_slug=slug, check_in_id=checkin_id,
                            status=MonitorStatus.IN_PROGRESS,
                            monitor_config=cast(Any, config or None))
            return slug, checkin_id, config
        return None

    def _checkin_end(self, checkin: tuple[str, str, dict[str, Any]], status: str,
                     duration: float) -> None:
        slug, checkin_id, config = checkin
        with capture_internal_exceptions():
            capture_checkin(monitor_slug=slug, check_in_id=checkin_id, status=status,
                            duration=duration, monitor_config=cast(Any, config or None))

    def _config(self, job: Job, cron: tuple[str, str] | None) -> dict[str, Any]:
        config: dict[str, Any] = {}
        crontab = sentry_crontab(cron[0]) if cron is not None else None
        if cron is not None and crontab is not None:
            config = {"schedule": {"type": "crontab", "value": crontab}, "timezone": cron[1]}
            task = self.app.tasks.get(job.task)
            timeout = task.defaults.timeout if task is not None else None
            if timeout is not None:
                config["max_runtime"] = max(1, math.ceil(timeout / 60))
        return {**config, **self.monitor_config} if config else config

    async def _cron_of(self, name: str) -> tuple[str, str] | None:
        """The schedule's (cron, time zone): from code, else from the database (a
        schedule added with ``app.add_schedule``), read once a minute at most."""
        schedule = self.app.schedules.get(name)
        if schedule is not None:
            return schedule.cron, schedule.timezone
        cached = self._stored.get(name)
        if cached is not None and time.monotonic() - cached[0] < _SCHEDULE_TTL:
            return cached[1]
        found = None
        async with asyncio.timeout(_LOOKUP_TIMEOUT):
            schedules = await self.app.list_schedules_async()
        for info in schedules:
            if info.row.name == name:
                found = (info.row.cron, info.row.timezone)
        self._stored[name] = (time.monotonic(), found)
        return found


def _hide_internals(event: dict[str, Any]) -> None:
    """Conveyor's own frames (worker, middleware chain) hold the job unredacted in their
    locals: send them without locals, and not as the application's code."""
    for value in (event.get("exception") or {}).get("values") or ():
        for frame in (value.get("stacktrace") or {}).get("frames") or ():
            module = frame.get("module") or ""
            if module == "conveyor" or module.startswith("conveyor."):
                frame.pop("vars", None)
                frame["in_app"] = False


def _schedule_of(job: Job) -> str | None:
    name = job.meta.get("schedule") if isinstance(job.meta, dict) else None
    return name if isinstance(name, str) else None


def _stopped(ctx: JobContext) -> bool:
    """The worker stopped this attempt (shutdown, lost lease, operator cancel): not a
    failure of the handler's own, as the executor judges it too."""
    current = asyncio.current_task()
    return ctx.cancelled or (current is not None and current.cancelling() > 0)


def monitor_slug(schedule: str) -> str:
    """The Sentry monitor slug of a schedule: lower case, ``[a-z0-9_-]``, 50 at most."""
    slug = _SLUG.sub("-", schedule.lower()).strip("-")
    return slug[:50] or "conveyor-schedule"


def sentry_crontab(expr: str) -> str | None:
    """``expr`` as a five-field crontab every parser reads alike, or None (the
    monitor is then left to be configured in Sentry)."""
    fields = expr.split()
    if len(fields) != 5 or not all(_PORTABLE_FIELD.fullmatch(f) for f in fields):
        return None
    if fields[2] != "*" and fields[4] != "*":
        return None  # day of month and day of week: parsers disagree on how they combine
    return " ".join(fields)


__all__ = ["install", "monitor_slug", "sentry_crontab"]
