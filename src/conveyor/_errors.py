"""Exceptions: control-flow signals a handler raises, and errors Conveyor raises."""

from __future__ import annotations

import math


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
    """The requested change does not apply to the job's current state."""


class PayloadTooLargeError(ConveyorError, ValueError):
    """A job's JSON payload is over the configured size cap."""


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
