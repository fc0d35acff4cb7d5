"""Exceptions: control-flow signals a handler raises, and errors Conveyor raises."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._job import Job


class ConveyorError(Exception):
    """Base class of every error Conveyor raises on its own account."""


class DatabaseUnavailableError(ConveyorError):
    """The database could not be reached (bad URL, server down, file not writable)."""


class StorageFullError(DatabaseUnavailableError):
    """The database's disk (or its configured size limit) is full: the write in progress
    was rolled back whole. Writes succeed again once space is freed; a worker keeps its
    outcomes and retries them, as it does while the database is away."""


class SchemaError(ConveyorError):
    """The schema is missing or older than this version of Conveyor expects."""


def unique_held(job_id: int) -> InvalidStateError:
    return InvalidStateError(
        f"job {job_id} cannot be retried: another live job holds its unique key"
    )


class JobNotFoundError(ConveyorError, LookupError):
    """No job has the given id."""


class InvalidStateError(ConveyorError):
    """The requested change does not apply to the job's current state. ``job`` is the
    job as it was found (None when the refusal did not read it), so an interface can
    say what state stood in the way."""

    def __init__(self, message: str, job: Job | None = None) -> None:
        super().__init__(message)
        self.job = job


class PayloadTooLargeError(ConveyorError, ValueError):
    """A job's JSON payload is over the configured size cap."""


class TaskTimedOut(Exception):
    """The task's own ``timeout=`` ran out (a handler's own TimeoutError is a failure).
    Raised inside the runtime and recorded as the attempt's error; integrations (Sentry)
    recognise it."""
class WorkflowError(ConveyorError, ValueError):
    """A workflow or a dependency list that cannot be inserted (a cycle, a bad
    reference, an unknown policy); nothing was written."""


class UnknownDependencyError(WorkflowError, LookupError):
    """A job depends on an id that no job has; nothing was written."""

    def __init__(self, ids: list[int]) -> None:
        super().__init__(f"unknown dependency job id(s): {', '.join(map(str, ids))}; "
                         "nothing was written")
        self.ids = ids


class BatchNotFoundError(ConveyorError, LookupError):
    """No batch has the given id."""


class ScheduleNotFoundError(ConveyorError, LookupError):
    """No schedule has the given name."""


class BatchClosedError(InvalidStateError):
    """Jobs cannot be added to a batch that is closed."""


class LimitExceeded(ConveyorError):
    """A limiter (``app.limiter``) did not grant within ``timeout`` seconds, outside a
    job (inside a handler the job is snoozed instead). ``retry_after``: seconds until
    the next chance, as far as the limiter knows.

    Example: ``except LimitExceeded as e: return Response(status=429, headers={"Retry-After": ...})``
    """

    def __init__(self, message: str, *, name: str, key: str | None = None,
                 retry_after: float = 0.0) -> None:
        super().__init__(message)
        self.name, self.key, self.retry_after = name, key, retry_after


class _JobSignal(Exception):
    """Raised by a handler to choose its job's outcome instead of failing."""


class Snooze(_JobSignal):
    """Put the job back for ``seconds`` without using an attempt.

    Example: ``raise Snooze(30)``
    """

    def __init__(self, seconds: float) -> None:
        if not isinstance(seconds, int | float) or not 0 <= seconds < math.inf:
            raise TypeError("Snooze(seconds) needs a finite number of seconds >= 0")
        super().__init__(f"snoozed for {seconds}s")
        self.seconds = float(seconds)


class Cancel(_JobSignal):
    """End the job as ``cancelled``; it will not be retried.

    Example: ``raise Cancel("order was refunded")``
    """

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        self.reason = reason


class Discard(_JobSignal):
    """End the job as ``discarded`` at once, whatever attempts remain.

    Example: ``raise Discard("recipient does not exist")``
    """

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        self.reason = reason


class Throttle(_JobSignal):
    """Say the upstream throttled this job: it runs again after ``retry_after`` seconds
    without using an attempt, and fetching from its queue backs off as long.

    ``scope="node"`` (the default): only this worker's fetch from the queue backs off.
    ``scope="queue"``: the whole queue cools down on every worker of the cluster (the
    cool-down is stored in the database); raised again soon after a cool-down ended,
    the next one is twice as long, up to ``THROTTLE_COOLDOWN_CAP`` seconds (or
    ``retry_after`` if that is longer). See docs/flow-control.md.

    Example: ``raise Throttle(retry_after=30, scope="queue")``
    """

    def __init__(self, retry_after: float = 1.0, scope: str = "node") -> None:
        if not isinstance(retry_after, int | float) or not 0 <= retry_after < math.inf:
            raise TypeError("Throttle(retry_after) needs a finite number of seconds >= 0")
        if scope not in THROTTLE_SCOPES:
            raise ValueError(f"Throttle(scope=) must be one of {THROTTLE_SCOPES}, got {scope!r}")
        super().__init__(f"throttled for {retry_after}s ({scope})")
        self.retry_after = float(retry_after)
        self.scope = scope


#: Where a Throttle applies: this worker's fetch only, or the queue on every worker.
THROTTLE_SCOPES = ("node", "queue")
#: Longest a queue's cool-down grows to by repeated Throttle(scope="queue") (seconds).
THROTTLE_COOLDOWN_CAP = 600.0


class JobFailedError(ConveyorError):
    """A job someone waited on (``job.wait``, ``app.wait_jobs``) ended without a result.

    ``.job`` is the finished job; the message carries its last error (class, message and
    traceback), so that the waiter's own traceback shows why the job failed.
    """

    #: The final state this error stands for ("discarded" or "cancelled").
    state = ""

    def __init__(self, job: Job, error: dict[str, Any] | None = None) -> None:
        self.job = job
        #: The job's last recorded error (a dict with "error" and "traceback"), or None.
        self.error = error
        text = f"job {job.id} ({job.task}) was {self.state}"
        if isinstance(error, dict):
            text += f": {error.get('error') or 'no error recorded'}"
            if error.get("traceback"):
                text += f"\n\nThe job's last traceback:\n{error['traceback']}"
        super().__init__(text)


class JobDiscardedError(JobFailedError):
    """The awaited job ended ``discarded`` (attempts used up, ``Discard``, an operator)."""

    state = "discarded"


class JobCancelledError(JobFailedError):
    """The awaited job ended ``cancelled`` (``Cancel``, ``app.cancel_job``)."""

    state = "cancelled"


class WaitTimeoutError(ConveyorError, TimeoutError):
    """The awaited job(s) did not finish in time; nothing was changed on them.
    ``job_ids`` are the ids of the jobs not finished, as the message names them."""

    def __init__(self, message: str, job_ids: list[int] | None = None) -> None:
        super().__init__(message)
        self.job_ids: list[int] = list(job_ids or [])
