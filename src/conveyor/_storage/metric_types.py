"""Params and rows of the metric methods of the storage protocol: minute rollups,
never-pruned totals and queue-depth samples (queries in ``<dialect>/sql/metrics.sql``)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True)
class MetricRow:
    """One additive sample: ``value`` is added to what the key already holds."""

    queue: str
    task: str
    metric: str
    value: float
    #: Start of the minute (unix seconds); None for the never-pruned totals.
    bucket: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class MetricsSeriesParams:
    #: Unix seconds; buckets at or after it.
    since: float
    queue: str | None = None
    #: Only this task's rollups (the metrics series; depth has no task).
    task: str | None = None
    #: Seconds per point: minutes are summed (depth: their peak) into buckets this
    #: wide, aligned on the epoch, in SQL (a 7-day chart reads 168 hourly points).
    step: float = 60.0
    #: Every queue summed as queue "*" (one series for the cluster).
    merged: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class MetricPoint:
    bucket: float
    queue: str
    metric: str
    value: float


@dataclasses.dataclass(frozen=True, slots=True)
class MetricTotal:
    queue: str
    task: str
    metric: str
    value: float


@dataclasses.dataclass(frozen=True, slots=True)
class DepthPoint:
    """``queue`` is ``"*"`` for all queues together (written with every sample)."""

    bucket: float
    queue: str
    state: str
    n: int
