"""Conveyor's Prometheus metric families as plain data, written once: what a scrape
reads from the database and the families it makes (names, types, help, labelled
samples). ``conveyor.contrib.prometheus`` hands them to a host app's prometheus-client
registry; the dashboard's ``/metrics`` writes them in the text exposition format itself
(so the dashboard needs no prometheus-client). The names are those of
``docs/metrics.md``.

Every value is read at scrape time: the counters and histograms are the running totals
every worker adds its outcomes to, the gauges are live counts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from ..._job import ACTIVE_STATES
from ..._metric_schema import BOUNDS, OUTCOMES
from ..._storage import MetricTotal, StateCount
from ..operations import Operations

if TYPE_CHECKING:
    from ..app import Conveyor

#: Final states stop being counted here (only waiting and running ones are exported).
FINAL_CAP = 100_000
DEPTH_STATES = tuple(s.value for s in ACTIVE_STATES)

FamilyType = Literal["counter", "gauge", "histogram"]


@dataclasses.dataclass(frozen=True, slots=True)
class MetricSample:
    """One labelled series of a family. ``value`` is a counter's or gauge's value, or a
    histogram's sum; a histogram's ``buckets`` are (upper bound, cumulative count)
    pairs ending with +Inf, whose count is the histogram's count."""

    labels: tuple[str, ...]
    value: float
    buckets: tuple[tuple[float, float], ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class MetricFamily:
    """A family as Prometheus names it: a counter's ``name`` has no ``_total`` (its
    samples are written ``<name>_total``), a histogram's samples are written
    ``<name>_bucket``, ``_count`` and ``_sum``."""

    name: str
    type: FamilyType
    help: str
    label_names: tuple[str, ...] = ()
    samples: tuple[MetricSample, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """What one scrape read from the database."""

    totals: Sequence[MetricTotal]
    counts: Sequence[StateCount]
    #: Every queue known to jobs, queue settings or live workers (each gets its gauges).
    queues: Sequence[str]
    workers_alive: int


def bucket_label(bound: float) -> str:
    """A histogram bucket's ``le`` label: ``0.005`` ... ``300.0``, then ``+Inf``."""
    return "+Inf" if math.isinf(bound) else repr(bound)


#: No figures at all: what ``describe`` names without a query.
EMPTY = Snapshot((), (), (), 0)


async def read(ops: Operations) -> Snapshot:
    """Read a scrape's worth of figures through the operator API (four queries)."""
    counts = await ops.count_by_queue(FINAL_CAP)
    alive = await ops.alive_nodes()
    names = {c.queue for c in counts if c.queue is not None}
    names |= {q.name for q in await ops.queue_rows()}
    names |= {q for n in alive for q in n.queues}
    return Snapshot(await ops.metric_totals(), counts, sorted(names), len(alive))


def read_blocking(app: Conveyor, timeout: float) -> Snapshot:
    """``read`` from a thread that is not the app's event loop (a prometheus-client
    registry scrapes from its own), given up after ``timeout`` seconds."""
    async def bounded() -> Snapshot:
        async with asyncio.timeout(timeout):
            return await read(Operations(app))

    return app._sync(bounded())


def families(snapshot: Snapshot | None, version: str) -> list[MetricFamily]:
    """The metric families of ``snapshot``; with None (the database cannot be used)
    only ``conveyor_database_up 0`` and the build info."""
    up = MetricFamily("conveyor_database_up", "gauge",
                      "1 when the database was reached for this scrape, else 0.",
                      samples=(MetricSample((), 0 if snapshot is None else 1),))
    build = MetricFamily("conveyor_build_info", "gauge",
                         "The Conveyor version serving these metrics.", ("version",),
                         (MetricSample((version,), 1),))
    if snapshot is None:
        return [up, build]
    by_key: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for t in snapshot.totals:
        by_key[(t.queue, t.task)][t.metric] = t.value
    finished = MetricFamily(
        "conveyor_jobs_finished", "counter", "Job attempts finished, by queue, task and outcome.",
        ("queue", "task", "outcome"),
        tuple(MetricSample((queue, task, outcome), values[outcome])
              for (queue, task), values in sorted(by_key.items())
              for outcome in OUTCOMES if outcome in values))
    run = _histogram("conveyor_job_run_seconds", "Run time of job attempts.", by_key, "runtime")
    latency = _histogram("conveyor_job_queue_latency_seconds",
                         "Time from a job being due to its attempt starting.", by_key, "latency")
    return [finished, run, latency, *_gauges(snapshot), up, build]


def _histogram(name: str, help_text: str, by_key: dict[tuple[str, str], dict[str, float]],
               prefix: str) -> MetricFamily:
    """Cumulative buckets from the stored per-bucket counts (``<prefix>_b<i>``)."""
    samples = []
    for (queue, task), values in sorted(by_key.items()):
        if values.get(f"{prefix}_count", 0) <= 0:
            continue
        cumulative, buckets = 0.0, []
        for i, bound in enumerate([*BOUNDS, math.inf]):
            cumulative += values.get(f"{prefix}_b{i}", 0.0)
            buckets.append((bound, cumulative))
        samples.append(MetricSample((queue, task), values.get(f"{prefix}_sum", 0.0),
                                    tuple(buckets)))
    return MetricFamily(name, "histogram", help_text, ("queue", "task"), tuple(samples))


def _gauges(snapshot: Snapshot) -> list[MetricFamily]:
    depth: dict[tuple[str, str], int] = {(q, s): 0 for q in snapshot.queues for s in DEPTH_STATES}
    for c in snapshot.counts:
        if c.queue is not None and c.state.value in DEPTH_STATES:
            depth[(c.queue, c.state.value)] = c.n
    jobs = MetricFamily("conveyor_queue_jobs", "gauge",
                        "Jobs waiting or running, by queue and state.", ("queue", "state"),
                        tuple(MetricSample(key, n) for key, n in sorted(depth.items())))
    workers = MetricFamily("conveyor_workers", "gauge", "Worker nodes with a recent heartbeat.",
                           samples=(MetricSample((), snapshot.workers_alive),))
    return [jobs, workers]


__all__ = ["EMPTY", "FINAL_CAP", "FamilyType", "MetricFamily", "MetricSample", "Snapshot",
           "bucket_label", "families", "read", "read_blocking"]
