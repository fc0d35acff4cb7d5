"""Conveyor's metrics as a prometheus-client collector, for the host app's own registry.

Example::

    from prometheus_client import CollectorRegistry, make_asgi_app
    from conveyor.contrib.prometheus import ConveyorCollector

    registry = CollectorRegistry()                # or prometheus_client.REGISTRY
    registry.register(ConveyorCollector(app))
    metrics_app = make_asgi_app(registry)         # your /metrics, beside your own metrics

Every value is read from the database at scrape time, through the app: the counters
and histograms are the running totals that every worker adds its outcomes to (so every
node and every process counts, once, and a restart loses nothing), the gauges are live
counts. Nothing is kept in the scraping process, which is why the collector works the
same under prometheus-client's multiprocess mode (see ``docs/metrics.md``). The
dashboard's ``/metrics`` is this collector, exposed alone. Needs ``prometheus-client``:
``pip install 'conveyor[prometheus]'`` (the ``web`` extra brings it too).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from .. import __version__
from .._errors import ConveyorError
from .._job import ACTIVE_STATES
from .._operations import Operations
from .._runtime.metrics import BOUNDS, OUTCOMES

try:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
except ImportError:  # pragma: no cover - exercised only without the extra
    raise ImportError("conveyor.contrib.prometheus needs prometheus-client: "
                      "pip install 'conveyor[prometheus]'") from None

if TYPE_CHECKING:
    from .._app import Conveyor
    from .._storage import MetricTotal, StateCount

log = logging.getLogger("conveyor.prometheus")

#: The text exposition format ``/metrics`` answers in.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Final states stop being counted here (only waiting and running ones are exported).
FINAL_CAP = 100_000
DEPTH_STATES = tuple(s.value for s in ACTIVE_STATES)


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """What one scrape read from the database."""

    totals: Sequence[MetricTotal]
    counts: Sequence[StateCount]
    #: Every queue known to jobs, queue settings or live workers (each gets its gauges).
    queues: Sequence[str]
    workers_alive: int


async def read(app: Conveyor) -> Snapshot:
    """Read a scrape's worth of figures through the operator API (four queries)."""
    ops = Operations(app)
    counts = await ops.count_by_queue(FINAL_CAP)
    alive = await ops.alive_nodes()
    names = {c.queue for c in counts if c.queue is not None}
    names |= {q.name for q in await ops.queue_rows()}
    names |= {q for n in alive for q in n.queues}
    return Snapshot(await ops.metric_totals(), counts, sorted(names), len(alive))


def families(snapshot: Snapshot | None, version: str = __version__) -> list[Metric]:
    """The metric families of ``snapshot``; with None (the database cannot be used)
    only ``conveyor_database_up 0`` and the build info."""
    up = GaugeMetricFamily("conveyor_database_up",
                           "1 when the database was reached for this scrape, else 0.")
    up.add_metric([], 0 if snapshot is None else 1)
    build = GaugeMetricFamily("conveyor_build_info", "The Conveyor version serving these metrics.",
                              labels=["version"])
    build.add_metric([version], 1)
    if snapshot is None:
        return [up, build]
    by_key: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for t in snapshot.totals:
        by_key[(t.queue, t.task)][t.metric] = t.value
    finished = CounterMetricFamily("conveyor_jobs_finished",
                                   "Job attempts finished, by queue, task and outcome.",
                                   labels=["queue", "task", "outcome"])
    for (queue, task), values in sorted(by_key.items()):
        for outcome in OUTCOMES:
            if outcome in values:
                finished.add_metric([queue, task, outcome], values[outcome])
    run = _histogram("conveyor_job_run_seconds", "Run time of job attempts.", by_key, "runtime")
    latency = _histogram("conveyor_job_queue_latency_seconds",
                         "Time from a job being due to its attempt starting.", by_key, "latency")
    return [finished, run, latency, *_gauges(snapshot), up, build]


def _histogram(name: str, help_text: str, by_key: dict[tuple[str, str], dict[str, float]],
               prefix: str) -> HistogramMetricFamily:
    """Cumulative buckets from the stored per-bucket counts (``<prefix>_b<i>``)."""
    family = HistogramMetricFamily(name, help_text, labels=["queue", "task"])
    for (queue, task), values in sorted(by_key.items()):
        if values.get(f"{prefix}_count", 0) <= 0:
            continue
        cumulative, buckets = 0.0, []
        for i, bound in enumerate([*BOUNDS, math.inf]):
            cumulative += values.get(f"{prefix}_b{i}", 0.0)
            buckets.append(("+Inf" if math.isinf(bound) else repr(bound), cumulative))
        family.add_metric([queue, task], buckets, values.get(f"{prefix}_sum", 0.0))
    return family


def _gauges(snapshot: Snapshot) -> list[Metric]:
    depth: dict[tuple[str, str], int] = {(q, s): 0 for q in snapshot.queues for s in DEPTH_STATES}
    for c in snapshot.counts:
        if c.queue is not None and c.state.value in DEPTH_STATES:
            depth[(c.queue, c.state.value)] = c.n
    jobs = GaugeMetricFamily("conveyor_queue_jobs", "Jobs waiting or running, by queue and state.",
                             labels=["queue", "state"])
    for (queue, state), n in sorted(depth.items()):
        jobs.add_metric([queue, state], n)
    workers = GaugeMetricFamily("conveyor_workers", "Worker nodes with a recent heartbeat.")
    workers.add_metric([], snapshot.workers_alive)
    return [jobs, workers]


class ConveyorCollector:
    """A prometheus-client collector of ``app``'s metrics (cluster-wide, from the
    database). Register it once, in the registry your ``/metrics`` serves.

    A scrape that cannot read the database within ``timeout`` seconds answers
    ``conveyor_database_up 0`` (and the build info) instead of failing the scrape.
    """

    def __init__(self, app: Conveyor, *, timeout: float = 5.0) -> None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.app = app
        self.timeout = float(timeout)

    def describe(self) -> list[Metric]:
        """The families, empty, so that registering costs no query."""
        return families(Snapshot((), (), (), 0))

    def collect(self) -> Iterable[Metric]:
        """Called by the registry at each scrape, from any thread but the app's own."""
        try:
            snapshot = self.app._sync(_bounded(self.app, self.timeout))
        except (ConveyorError, TimeoutError, OSError) as exc:
            log.warning("conveyor metrics: database unreachable: %s", exc)
            snapshot = None
        return families(snapshot)


async def _bounded(app: Conveyor, timeout: float) -> Snapshot:
    async with asyncio.timeout(timeout):
        return await read(app)


def exposition(metrics: Iterable[Metric]) -> bytes:
    """The text exposition (format 0.0.4) of ``metrics``, by prometheus-client."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(list(metrics)))
    return generate_latest(registry)


class _Fixed:
    """Families already read (the dashboard reads them on its own event loop)."""

    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self._metrics


__all__ = ["CONTENT_TYPE", "ConveyorCollector", "Snapshot", "exposition", "families", "read"]
