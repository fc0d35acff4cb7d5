"""Per-minute metric rollups of what this worker's attempts did.

Each outcome the worker wrote (the metrics service listens to the worker's observed
storage, the one place outcomes pass) adds to in-memory counters keyed by (minute, queue, task,
metric); every few seconds the writer adds them to the database in one transaction,
to the minute rollups and to the never-pruned totals behind ``/metrics``. Values are
added to what a row holds, so any number of nodes write the same rows. The leader
also samples queue depth once a minute and prunes rollups past their retention.

Minutes are taken from this machine's wall clock (``time.time()``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from .._job import JobState
from .._metric_schema import BOUNDS, bucket_index, minute_of
from .._storage import (
    JobAck,
    MetricRow,
    Storage,
)
from .service import Leadership, Service

if TYPE_CHECKING:
    import asyncio

    from .._observed import Attempt

log = logging.getLogger("conveyor.metrics")

Key = tuple[float | None, str, str, str]


def outcome_of(ack: JobAck) -> str:
    """The outcome an ack records: a given-back attempt (snooze, throttle, shutdown)
    is ``snoozed``; an error with attempts left is ``retried``."""
    if ack.state == JobState.COMPLETED:
        return "completed"
    if ack.state in (JobState.DISCARDED, JobState.CANCELLED):
        return ack.state.value
    return "snoozed" if ack.attempt_delta < 0 else "retried"


class Metrics(Service):
    """Collects what this worker's jobs did; flushes rollups, samples depth, prunes.

    Example (tests): ``metrics.finished(attempt, ack); await metrics.run_once()``
    """

    name = "metrics"

    def __init__(self, storage: Storage, leader: Leadership, interval: float, retention: float,
                 drained: Callable[[], Awaitable[None]] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._storage, self._leader = storage, leader
        self.interval = interval
        self.retention = retention
        self._drained = drained
        self._clock = clock
        self._pending: dict[Key, float] = {}
        self._cells: dict[tuple[float, str, str], _Cell] = {}
        self._sampled: float | None = None
        self._pruned = 0.0

    @property
    def enabled(self) -> bool:
        return self.retention > 0

    # -- collecting ------------------------------------------------------------------------

    def finished(self, attempt: Attempt, ack: JobAck) -> None:
        """An outcome of this worker was written (the fence held)."""
        self.finished_many([(attempt, ack)])

    def finished_many(self, outcomes: Sequence[tuple[Attempt, JobAck]]) -> None:
        """One ack flush's written outcomes: the minute is read once per flush and each
        outcome only bumps its cell's counters (this runs for every job)."""
        if not self.enabled or not outcomes:
            return
        minute = minute_of(self._clock())
        cells = self._cells
        for attempt, ack in outcomes:
            job = attempt.job
            key = (minute, job.queue, job.task)
            cell = cells.get(key)
            if cell is None:
                cell = cells[key] = _Cell()
            latency = None
            if job.attempted_at is not None:
                latency = max((job.attempted_at - job.scheduled_at).total_seconds(), 0.0)
            outcome = "completed" if ack.state is JobState.COMPLETED else outcome_of(ack)
            cell.add(outcome, attempt.run_time, latency)

    def record(self, queue: str, task: str, outcome: str, run_time: float | None,
               latency: float | None) -> None:
        """Count one attempt; it only bumps one cell's counters (the rows are expanded
        from the cells once per flush, in ``_fold``)."""
        key = (minute_of(self._clock()), queue, task)
        cell = self._cells.get(key)
        if cell is None:
            cell = self._cells[key] = _Cell()
        cell.add(outcome, run_time, latency)

    def _fold(self) -> None:
        """Expand the cells into ``_pending``: one row per minute and one per total."""
        cells, self._cells = self._cells, {}
        pending = self._pending
        for (minute, queue, task), cell in cells.items():
            for metric, value in cell.samples():
                for bucket in (minute, None):
                    key = (bucket, queue, task, metric)
                    pending[key] = pending.get(key, 0.0) + value

    # -- writing ---------------------------------------------------------------------------

    async def flush(self) -> int:
        """Add what was collected since the last flush; kept for the next one on failure."""
        self._fold()
        pending, self._pending = self._pending, {}
        if not pending:
            return 0
        rows = [MetricRow(queue, task, metric, value, bucket)
                for (bucket, queue, task, metric), value in sorted(pending.items(), key=_order)]
        try:
            await self._storage.metrics_add(rows)
        except BaseException:
            for key, value in pending.items():
                self._pending[key] = self._pending.get(key, 0.0) + value
            raise
        return len(rows)

    async def run_once(self) -> int:
        if not self.enabled:
            return 0
        written = await self.flush()
        if self._leader.is_leader:
            now = self._clock()
            minute = minute_of(now)
            if minute != self._sampled:
                await self._storage.metrics_depth_sample(minute)
                self._sampled = minute
            if now - self._pruned >= 300:
                pruned = await self._storage.metrics_prune(now - self.retention)
                self._pruned = now
                if pruned:
                    log.debug("pruned %d metric rows older than %.0fs", pruned, self.retention)
        return written

    async def run(self, stopping: asyncio.Event) -> None:
        """Run until stopped, then write what the last acks added."""
        if not self.enabled:
            return
        await super().run(stopping)
        if self._drained is not None:
            await self._drained()
        with contextlib.suppress(Exception):
            await self.flush()


class _Cell:
    """What one (minute, queue, task) collected: outcome counts, and for run time and
    queue latency their sum, count and histogram."""

    __slots__ = ("latency", "outcomes", "runtime")

    def __init__(self) -> None:
        self.outcomes: dict[str, int] = {}
        # [sum, count, bucket counts...]
        self.runtime: list[float] = [0.0] * (len(BOUNDS) + 3)
        self.latency: list[float] = [0.0] * (len(BOUNDS) + 3)

    def add(self, outcome: str, run_time: float | None, latency: float | None) -> None:
        outcomes = self.outcomes
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if run_time is not None:
            acc = self.runtime
            acc[0] += run_time
            acc[1] += 1
            acc[2 + bucket_index(run_time)] += 1
        if latency is not None:
            acc = self.latency
            acc[0] += latency
            acc[1] += 1
            acc[2 + bucket_index(latency)] += 1

    def samples(self) -> list[tuple[str, float]]:
        out = [(outcome, float(n)) for outcome, n in self.outcomes.items()]
        for name, acc in (("runtime", self.runtime), ("latency", self.latency)):
            if acc[1]:
                out += [(f"{name}_sum", acc[0]), (f"{name}_count", acc[1])]
                out += [(f"{name}_b{i}", n) for i, n in enumerate(acc[2:]) if n]
        return out


def _order(item: tuple[Key, float]) -> tuple[float, str, str, str]:
    """Minute rows first, then totals, each in key order (a fixed lock order)."""
    (bucket, queue, task, metric), _ = item
    return (bucket if bucket is not None else math.inf, queue, task, metric)
