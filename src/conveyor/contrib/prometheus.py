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
families are the operator API's (``conveyor._app.reads.metrics``), the same ones the
dashboard's ``/metrics`` writes by itself. Needs ``prometheus-client``:
``pip install 'conveyor[prometheus]'``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .. import __version__
from .._app import reads
from .._app.operations import Operations
from .._app.reads.metrics import EMPTY, MetricFamily, Snapshot, bucket_label, read_blocking
from .._errors import ConveyorError

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

log = logging.getLogger("conveyor.prometheus")

#: The text exposition format ``/metrics`` answers in.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


async def read(app: Conveyor) -> Snapshot:
    """Read a scrape's worth of figures through the operator API (four queries)."""
    return await reads.read(Operations(app))


def families(snapshot: Snapshot | None, version: str = __version__) -> list[Metric]:
    """The metric families of ``snapshot`` as prometheus-client families; with None
    (the database cannot be used) only ``conveyor_database_up 0`` and the build info."""
    return [to_client(f) for f in reads.families(snapshot, version)]


def to_client(family: MetricFamily) -> Metric:
    """One family in prometheus-client's own classes, for a registry."""
    labels = list(family.label_names)
    if family.type == "histogram":
        histogram = HistogramMetricFamily(family.name, family.help, labels=labels)
        for s in family.samples:
            histogram.add_metric(list(s.labels), [(bucket_label(b), n) for b, n in s.buckets],
                                 s.value)
        return histogram
    kind = CounterMetricFamily if family.type == "counter" else GaugeMetricFamily
    metric = kind(family.name, family.help, labels=labels)
    for s in family.samples:
        metric.add_metric(list(s.labels), s.value)
    return metric


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
        return families(EMPTY)

    def collect(self) -> Iterable[Metric]:
        """Called by the registry at each scrape, from any thread but the app's own."""
        try:
            snapshot = read_blocking(self.app, self.timeout)
        except (ConveyorError, TimeoutError, OSError) as exc:
            log.warning("conveyor metrics: database unreachable: %s", exc)
            snapshot = None
        return families(snapshot)


def exposition(metrics: Iterable[Metric]) -> bytes:
    """The text exposition (format 0.0.4) of ``metrics``, by prometheus-client."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(list(metrics)))
    return generate_latest(registry)


class _Fixed:
    """Families already read (e.g. on another event loop)."""

    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self._metrics


__all__ = ["CONTENT_TYPE", "ConveyorCollector", "Snapshot", "exposition", "families", "read",
           "to_client"]
