"""What a stored metric is: the histogram buckets, the outcome names and the minute a
rollup belongs to. The workers write metrics in this shape (``_runtime/metrics.py``);
the operator reads (``_app/reads``), the dashboard and the Prometheus collector read
them back in it, so it lives below all of them."""

from __future__ import annotations

import bisect
import math

#: Upper bounds (seconds) of the histogram buckets of run time and queue latency; the
#: last bucket (index ``len(BOUNDS)``) is everything above.
BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
#: What an attempt ended as, in the ``outcome`` label and metric names.
OUTCOMES = ("completed", "retried", "discarded", "cancelled", "snoozed")
#: Metric names that count failures (for the failure rate).
FAILED = ("retried", "discarded")


def bucket_index(seconds: float) -> int:
    """The histogram bucket (index into ``BOUNDS``, or ``len(BOUNDS)``) of ``seconds``."""
    return bisect.bisect_left(BOUNDS, seconds)


def minute_of(ts: float) -> float:
    """The start of the minute (Unix seconds) that rollups file ``ts`` under."""
    return float(math.floor(ts / 60.0) * 60)


__all__ = ["BOUNDS", "FAILED", "OUTCOMES", "bucket_index", "minute_of"]
