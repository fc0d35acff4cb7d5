"""Metric rollups turned into what the overview shows (the dashboard's charts and
``conveyor status``): per-minute series for the last hour and percentiles from
histogram buckets."""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence

from ..._job import ACTIVE_STATES
from ..._metric_schema import BOUNDS, FAILED, minute_of
from ..._storage import DepthPoint, MetricPoint

DEPTH_STATES = tuple(s.value for s in ACTIVE_STATES)


def quantile(q: float, counts: Sequence[float]) -> float | None:
    """The q-quantile of a histogram (counts per bucket of ``BOUNDS``, then +Inf),
    interpolated linearly inside its bucket, as Prometheus' histogram_quantile does."""
    total = sum(counts)
    if total <= 0:
        return None
    rank, seen = q * total, 0.0
    for i, count in enumerate(counts):
        if count > 0 and seen + count >= rank:
            if i >= len(BOUNDS):
                return BOUNDS[-1]
            low = BOUNDS[i - 1] if i > 0 else 0.0
            return low + (BOUNDS[i] - low) * (rank - seen) / count
        seen += count
    return BOUNDS[-1]


def histogram(values: dict[str, float], prefix: str) -> list[float]:
    return [values.get(f"{prefix}_b{i}", 0.0) for i in range(len(BOUNDS) + 1)]


@dataclasses.dataclass(frozen=True, slots=True)
class Series:
    """The last hour, minute by minute (oldest first)."""

    minutes: list[float]
    completed: list[float]
    failed: list[float]
    failure_rate: list[float | None]
    p50: list[float | None]
    p95: list[float | None]
    run_p95: list[float | None]
    depth: dict[str, list[float | None]]
    #: Over the whole hour.
    hour_completed: float
    hour_failed: float
    hour_p50: float | None
    hour_p95: float | None

    @property
    def hour_failure_rate(self) -> float | None:
        done = self.hour_completed + self.hour_failed
        return self.hour_failed / done if done else None

    @property
    def per_minute(self) -> float:
        """Completed jobs per minute over the last five whole minutes."""
        return sum(self.completed[-6:-1]) / 5


def hour_window(now: float | None = None, minutes: int = 60) -> list[float]:
    last = minute_of(time.time() if now is None else now)
    return [last - 60.0 * i for i in range(minutes - 1, -1, -1)]


def build_series(points: Iterable[MetricPoint], depth: Iterable[DepthPoint],
                 minutes: list[float]) -> Series:
    per: dict[float, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    hour: dict[str, float] = defaultdict(float)
    for p in points:
        if p.bucket >= minutes[0]:
            per[p.bucket][p.metric] += p.value
            hour[p.metric] += p.value
    sampled: dict[float, dict[str, float]] = defaultdict(dict)
    for d in depth:
        if d.queue == "*":
            sampled[d.bucket][d.state] = float(d.n)
    completed = [per[m]["completed"] for m in minutes]
    failed = [sum(per[m][k] for k in FAILED) for m in minutes]
    rates = [f / (c + f) if c + f else None for c, f in zip(completed, failed, strict=True)]
    return Series(
        minutes=minutes, completed=completed, failed=failed, failure_rate=rates,
        p50=[quantile(0.5, histogram(per[m], "latency")) for m in minutes],
        p95=[quantile(0.95, histogram(per[m], "latency")) for m in minutes],
        run_p95=[quantile(0.95, histogram(per[m], "runtime")) for m in minutes],
        depth={s: [sampled[m].get(s) if m in sampled else None for m in minutes]
               for s in DEPTH_STATES},
        hour_completed=hour["completed"], hour_failed=sum(hour[k] for k in FAILED),
        hour_p50=quantile(0.5, histogram(hour, "latency")),
        hour_p95=quantile(0.95, histogram(hour, "latency")),
    )


def per_queue(points: Iterable[MetricPoint]) -> dict[str, dict[str, float]]:
    """Sums per queue and metric (e.g. the last hour's completed jobs of each queue)."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for p in points:
        out[p.queue][p.metric] += p.value
    return out
