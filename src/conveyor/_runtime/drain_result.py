"""What a drain (``app.drain()``, the testing toolkit's inline mode) reports: one
``Outcome`` per attempt it ran, gathered in a ``DrainResult``, read from the fenced
outcome each attempt wrote."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

from .._job import Job, JobState
from .._routing import describe
from .._storage import JobAck

#: The most skipped jobs a drain lists (``DrainResult.skipped``).
MAX_SKIPPED_LISTED = 1_000


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """What one attempt did: ``kind`` is completed, retried, discarded, cancelled or
    snoozed (a Snooze or Throttle: back later, attempt given back)."""

    job: Job
    kind: str
    #: The state the attempt left the job in.
    state: JobState
    result: Any = None
    error: str | None = None

    @property
    def id(self) -> int:
        return self.job.id

    @property
    def task(self) -> str:
        return self.job.task

    @property
    def queue(self) -> str:
        return self.job.queue

    @property
    def attempt(self) -> int:
        return self.job.attempt


@dataclasses.dataclass(slots=True)
class DrainResult:
    """What ``app.drain()`` ran, in order; ``held`` are jobs a rate or concurrency limit
    sent back to wait."""

    outcomes: list[Outcome] = dataclasses.field(default_factory=list)
    held: list[Job] = dataclasses.field(default_factory=list)
    #: Due jobs of the drained queues that this drain could not run, left waiting: they
    #: require worker labels it was not given (``labels=``), or their task is outside
    #: ``tasks=`` (at most ``MAX_SKIPPED_LISTED`` of them).
    skipped: list[Job] = dataclasses.field(default_factory=list)

    def __len__(self) -> int:
        return len(self.outcomes)

    def __iter__(self) -> Iterator[Outcome]:
        return iter(self.outcomes)

    def __repr__(self) -> str:
        counts = ", ".join(f"{k}={len(self._of(k))}" for k in
                           ("completed", "retried", "discarded", "cancelled", "snoozed"))
        skipped = f", skipped={len(self.skipped)}" if self.skipped else ""
        return f"<DrainResult {counts}, held={len(self.held)}{skipped}>"

    @property
    def skipped_reasons(self) -> list[str]:
        """Why each skipped job was left, e.g. ``"job 7 (train): needs gpu=a100"``."""
        return [f"job {j.id} ({j.task}): " + (f"needs {describe(j.requires)}" if j.requires
                                               else "its task is not among tasks=")
                for j in self.skipped]

    def _of(self, kind: str) -> list[Outcome]:
        return [o for o in self.outcomes if o.kind == kind]

    @property
    def completed(self) -> list[Outcome]:
        return self._of("completed")

    @property
    def retried(self) -> list[Outcome]:
        return self._of("retried")

    @property
    def discarded(self) -> list[Outcome]:
        return self._of("discarded")

    @property
    def cancelled(self) -> list[Outcome]:
        return self._of("cancelled")

    @property
    def snoozed(self) -> list[Outcome]:
        return self._of("snoozed")

    @property
    def errors(self) -> list[str]:
        """The error of every failed, discarded or cancelled attempt, in order."""
        return [o.error for o in self.outcomes if o.error is not None]


def outcome_kind(ack: JobAck) -> str:
    if ack.state in (JobState.COMPLETED, JobState.DISCARDED, JobState.CANCELLED):
        return ack.state.value
    if ack.error_json is not None:  # failed, back after its backoff (or at once)
        return "retried"
    return "snoozed"


def outcome_of(job: Job, ack: JobAck) -> Outcome:
    result = json.loads(ack.result_json) if ack.result_json is not None else None
    error = json.loads(ack.error_json).get("error") if ack.error_json is not None else None
    return Outcome(job, outcome_kind(ack), ack.state, result, error)
