"""Metric rollups turned into what the overview charts and ``/metrics`` show:
per-minute series for the last hour, percentiles from histogram buckets, and the
Prometheus text exposition format (version 0.0.4), written without prometheus-client.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence

from .._job import ACTIVE_STATES
from .._runtime.metrics import BOUNDS, FAILED, OUTCOMES, minute_of
from .._storage import DepthPoint, MetricPoint, MetricTotal, StateCount

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


# -- Prometheus ----------------------------------------------------------------------------


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{_label(v)}"' for k, v in labels.items()) + "}"


def _num(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(int(value)) if float(value).is_integer() and abs(value) < 1e15 else repr(value)


def _family(name: str, kind: str, help_text: str) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]


def _histogram(name: str, help_text: str, series: dict[tuple[str, str], dict[str, float]],
               prefix: str) -> list[str]:
    lines = _family(name, "histogram", help_text)
    for (queue, task), values in sorted(series.items()):
        if values.get(f"{prefix}_count", 0) <= 0:
            continue
        cumulative = 0.0
        for bound, count in zip([*BOUNDS, math.inf], histogram(values, prefix), strict=True):
            cumulative += count
            le = "+Inf" if math.isinf(bound) else repr(bound)
            lines.append(f"{name}_bucket{_labels(queue=queue, task=task, le=le)} {_num(cumulative)}")
        labels = _labels(queue=queue, task=task)
        lines.append(f"{name}_sum{labels} {_num(values.get(f'{prefix}_sum', 0.0))}")
        lines.append(f"{name}_count{labels} {_num(values[f'{prefix}_count'])}")
    return lines


def exposition(totals: Iterable[MetricTotal], counts: Iterable[StateCount], queues: Iterable[str],
               workers_alive: int, version: str) -> str:
    """The ``/metrics`` document: counters and histograms from the database's running
    totals (so every node's work counts, and restarts lose nothing), gauges live."""
    by_key: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for t in totals:
        by_key[(t.queue, t.task)][t.metric] = t.value
    lines = _family("conveyor_jobs_finished_total", "counter",
                    "Job attempts finished, by queue, task and outcome.")
    for (queue, task), values in sorted(by_key.items()):
        for outcome in OUTCOMES:
            if outcome in values:
                labels = _labels(queue=queue, task=task, outcome=outcome)
                lines.append(f"conveyor_jobs_finished_total{labels} {_num(values[outcome])}")
    lines += _histogram("conveyor_job_run_seconds", "Run time of job attempts.", by_key,
                        "runtime")
    lines += _histogram("conveyor_job_queue_latency_seconds",
                        "Time from a job being due to its attempt starting.", by_key, "latency")
    depth: dict[tuple[str, str], int] = {(q, s): 0 for q in queues for s in DEPTH_STATES}
    for c in counts:
        if c.queue is not None:
            depth[(c.queue, c.state.value)] = c.n
    lines += _family("conveyor_queue_jobs", "gauge", "Jobs waiting or running, by queue and state.")
    lines += [f"conveyor_queue_jobs{_labels(queue=q, state=s)} {n}"
              for (q, s), n in sorted(depth.items())]
    lines += _family("conveyor_workers", "gauge", "Worker nodes with a recent heartbeat.")
    lines.append(f"conveyor_workers {workers_alive}")
    return "\n".join(lines + _database_up(1) + _build_info(version)) + "\n"


def exposition_down(version: str) -> str:
    """``/metrics`` while the database cannot be used: only what is known."""
    return "\n".join(_database_up(0) + _build_info(version)) + "\n"


def _database_up(up: int) -> list[str]:
    return [*_family("conveyor_database_up", "gauge",
                     "1 when the dashboard reached the database for this scrape, else 0."),
            f"conveyor_database_up {up}"]


def _build_info(version: str) -> list[str]:
    return [*_family("conveyor_build_info", "gauge", "The Conveyor version serving /metrics."),
            f"conveyor_build_info{_labels(version=version)} 1"]
