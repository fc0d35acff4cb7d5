"""Metric rollups turned into what the overview shows (the dashboard's charts and
``conveyor status``): series over a range (the last hour minute by minute, 24 hours in
5-minute and 7 days in 1-hour buckets, summed in SQL) and percentiles from histogram
buckets."""

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
    #: Over the whole range (the last hour for the 1h range).
    hour_completed: float
    hour_failed: float
    hour_p50: float | None
    hour_p95: float | None
    #: Seconds per point.
    step: float = 60.0

    @property
    def hour_failure_rate(self) -> float | None:
        done = self.hour_completed + self.hour_failed
        return self.hour_failed / done if done else None

    @property
    def per_minute(self) -> float:
        """Completed jobs per minute over the last five whole minutes (a longer
        step: over the last whole bucket)."""
        if self.step != 60.0 or len(self.completed) < 6:
            return (self.completed[-2] if len(self.completed) > 1 else 0.0) * 60 / self.step
        return sum(self.completed[-6:-1]) / 5


@dataclasses.dataclass(frozen=True, slots=True)
class Range:
    """A chart range: ``seconds`` long in ``step``-second points (at most 288), an axis
    label every ``label_every`` points written with ``axis`` (strftime, UTC)."""

    name: str
    title: str
    seconds: int
    step: int
    label_every: int
    axis: str

    @property
    def points(self) -> int:
        return self.seconds // self.step

    @property
    def per(self) -> str:
        """What one point covers: "minute", "5 minutes", "hour"."""
        return {60: "minute", 3600: "hour"}.get(self.step, f"{self.step // 60} minutes")


#: The ranges a chart offers (``?range=``); the rollups are kept 7 days by default
#: (``--metrics-retention``), so 7d is the longest.
RANGES = {r.name: r for r in (
    Range("1h", "last hour", 3600, 60, 15, "%H:%M"),
    Range("24h", "last 24 hours", 86_400, 300, 48, "%H:%M"),
    Range("7d", "last 7 days", 604_800, 3600, 24, "%a %d"),
)}
DEFAULT_RANGE = RANGES["1h"]


def window(rng: Range, now: float | None = None) -> list[float]:
    """The start of each point of ``rng``, oldest first, the last one holding now."""
    moment = time.time() if now is None else now
    last = (moment // rng.step) * rng.step
    return [last - rng.step * i for i in range(rng.points - 1, -1, -1)]


def hour_window(now: float | None = None, minutes: int = 60) -> list[float]:
    last = minute_of(time.time() if now is None else now)
    return [last - 60.0 * i for i in range(minutes - 1, -1, -1)]


def build_series(points: Iterable[MetricPoint], depth: Iterable[DepthPoint],
                 minutes: list[float], depth_queue: str = "*") -> Series:
    per: dict[float, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    hour: dict[str, float] = defaultdict(float)
    for p in points:
        if p.bucket >= minutes[0]:
            per[p.bucket][p.metric] += p.value
            hour[p.metric] += p.value
    sampled: dict[float, dict[str, float]] = defaultdict(dict)
    for d in depth:
        if d.queue == depth_queue:
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
        step=minutes[1] - minutes[0] if len(minutes) > 1 else 60.0,
    )


def per_queue(points: Iterable[MetricPoint]) -> dict[str, dict[str, float]]:
    """Sums per queue and metric (e.g. the last hour's completed jobs of each queue)."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for p in points:
        out[p.queue][p.metric] += p.value
    return out
