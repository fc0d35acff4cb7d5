"""``/metrics``: the operator API's metric families (``conveyor._app.reads.metrics``)
written in the Prometheus text exposition format (0.0.4), byte for byte as
prometheus-client writes them, so the dashboard needs no prometheus-client. A host app
that wants the families in its own registry uses ``conveyor.contrib.prometheus``."""

from __future__ import annotations

import math
from collections.abc import Iterable

from .._app.reads import MetricFamily, bucket_label

#: The media type ``/metrics`` answers with.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def exposition(families: Iterable[MetricFamily]) -> bytes:
    """Every family: its ``# HELP`` and ``# TYPE`` lines, then one line per sample
    (a counter's name ends in ``_total``; a histogram has ``_bucket``, ``_count`` and
    ``_sum`` lines)."""
    lines: list[str] = []
    for family in families:
        name = f"{family.name}_total" if family.type == "counter" else family.name
        lines.append(f"# HELP {name} {_escape_help(family.help)}")
        lines.append(f"# TYPE {name} {family.type}")
        for sample in family.samples:
            labels = list(zip(family.label_names, sample.labels, strict=True))
            if family.type != "histogram":
                lines.append(_line(name, labels, sample.value))
                continue
            for bound, cumulative in sample.buckets:
                lines.append(_line(f"{name}_bucket", [*labels, ("le", bucket_label(bound))],
                                   cumulative))
            lines.append(_line(f"{name}_count", labels, sample.buckets[-1][1]))
            lines.append(_line(f"{name}_sum", labels, sample.value))
    return "".join(f"{line}\n" for line in lines).encode()


def _line(name: str, labels: list[tuple[str, str]], value: float) -> str:
    if not labels:
        return f"{name} {go_float(value)}"
    pairs = ",".join(f'{k}="{_escape_label(v)}"' for k, v in sorted(labels))
    return f"{name}{{{pairs}}} {go_float(value)}"


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _escape_label(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def go_float(value: float) -> str:
    """A sample value as Prometheus (Go) writes it: ``+Inf``, ``NaN``, ``3.0``, and
    an exponent for large numbers (``1.2345678e+07``)."""
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = repr(value)
    dot = text.find(".")
    if value > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


__all__ = ["CONTENT_TYPE", "exposition", "go_float"]
