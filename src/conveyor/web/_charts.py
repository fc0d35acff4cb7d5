"""Charts drawn on the server as inline SVG: no JavaScript, no external assets.

Colours come from CSS classes (the stylesheet), not inline styles, so the
Content-Security-Policy can forbid inline styles too. Every minute has an invisible
hover area whose ``<title>`` is the browser's tooltip with that minute's values. A
longer range (``?range=24h|7d``) draws one point per 5 minutes or per hour: at most
288 points a series, whatever the range.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from markupsafe import Markup, escape

from .._app.reads import DEFAULT_RANGE, Range, Series
from .._format import number, percent, seconds

WIDTH, HEIGHT = 640, 170
LEFT, RIGHT, TOP, BOTTOM = 48, 8, 10, 22


@dataclasses.dataclass(frozen=True, slots=True)
class Line:
    name: str
    values: Sequence[float | None]
    css: str


def nice_max(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above ``value``."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power:
            return float(step * power)
    return float(10 * power)


def _axis(ts: float, rng: Range) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime(rng.axis)


def _frame(minutes: Sequence[float], top: float, fmt: Callable[[float], str],
           label: str, rng: Range) -> list[str]:
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
             f'aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">',
             f"<title>{escape(label)}</title>"]
    for frac in (0.0, 0.5, 1.0):
        y = TOP + plot_h * (1 - frac)
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" '
                     f'y2="{y:.1f}"/>')
        parts.append(f'<text class="axis" x="{LEFT - 4}" y="{y + 3:.1f}" text-anchor="end">'
                     f"{escape(fmt(top * frac))}</text>")
    step = plot_w / max(len(minutes), 1)
    for i, minute in enumerate(minutes):
        if i % rng.label_every == 0 or i == len(minutes) - 1:
            x = LEFT + step * (i + 0.5)
            parts.append(f'<text class="axis" x="{x:.1f}" y="{HEIGHT - 6}" '
                         f'text-anchor="middle">{escape(_axis(minute, rng))}</text>')
    return parts


def _hover(minutes: Sequence[float], lines: Sequence[Line], fmt: Callable[[float], str],
           rng: Range) -> list[str]:
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = plot_w / max(len(minutes), 1)
    out = []
    for i, minute in enumerate(minutes):
        values = ", ".join(
            f"{line.name} {fmt(v) if (v := line.values[i]) is not None else '-'}"
            for line in lines)
        out.append(f'<rect class="hover" x="{LEFT + step * i:.1f}" y="{TOP}" width="{step:.1f}" '
                   f'height="{plot_h}"><title>{escape(_when(minute, rng))} UTC: {escape(values)}'
                   "</title></rect>")
    return out


def _when(ts: float, rng: Range) -> str:
    """A point's start in its tooltip: HH:MM, with the day for a range over days."""
    return datetime.fromtimestamp(ts, UTC).strftime(
        "%H:%M" if rng.seconds <= 3600 else "%a %d %b %H:%M")


def bars(minutes: Sequence[float], stacks: Sequence[Line], label: str,
         fmt: Callable[[float], str] = number, rng: Range = DEFAULT_RANGE) -> Markup:
    """Stacked bars, one per point (e.g. completed and failed jobs)."""
    totals = [sum(s.values[i] or 0.0 for s in stacks) for i in range(len(minutes))]
    top = nice_max(max(totals, default=0.0))
    parts = _frame(minutes, top, fmt, label, rng)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = plot_w / max(len(minutes), 1)
    for i in range(len(minutes)):
        base = 0.0
        for stack in stacks:
            value = stack.values[i] or 0.0
            if value <= 0:
                continue
            h = plot_h * value / top
            y = TOP + plot_h * (1 - (base + value) / top)
            parts.append(f'<rect class="{stack.css}" x="{LEFT + step * i + 0.5:.1f}" y="{y:.1f}" '
                         f'width="{max(step - 1, 1):.1f}" height="{h:.1f}"/>')
            base += value
    parts += _hover(minutes, stacks, fmt, rng)
    parts.append("</svg>")
    return Markup("".join(parts))


def lines(minutes: Sequence[float], series: Sequence[Line], label: str,
          fmt: Callable[[float], str] = number, rng: Range = DEFAULT_RANGE) -> Markup:
    """Lines, broken where a point has no value."""
    values = [v for s in series for v in s.values if v is not None]
    top = nice_max(max(values, default=0.0))
    parts = _frame(minutes, top, fmt, label, rng)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = plot_w / max(len(minutes), 1)
    for s in series:
        run: list[str] = []
        for i, value in enumerate([*s.values, None]):
            if value is None:
                if len(run) == 1:
                    parts.append(f'<circle class="{s.css}" r="2" cx="{run[0].split(",")[0]}" '
                                 f'cy="{run[0].split(",")[1]}"/>')
                elif run:
                    parts.append(f'<polyline class="{s.css}" points="{" ".join(run)}"/>')
                run = []
                continue
            run.append(f"{LEFT + step * (i + 0.5):.1f},{TOP + plot_h * (1 - value / top):.1f}")
    parts += _hover(minutes, series, fmt, rng)
    parts.append("</svg>")
    return Markup("".join(parts))


def chart_set(s: Series, rng: Range, depth: bool = True) -> dict[str, Markup]:
    """The overview's charts (and a queue's or a task's: a task has no depth) over
    ``rng``, one point per ``rng.per``."""
    per = rng.per
    charts = {
        "throughput": bars(s.minutes, [Line("completed", s.completed, "s-completed"),
                                       Line("failed", s.failed, "s-failed")],
                           f"Jobs finished per {per}", rng=rng),
        "failure": lines(s.minutes, [Line("failure rate", s.failure_rate, "s-failed")],
                         f"Failure rate per {per}", percent, rng=rng),
        "latency": lines(s.minutes, [Line("p50", s.p50, "s-p50"), Line("p95", s.p95, "s-p95")],
                         "Enqueue-to-start latency", seconds, rng=rng),
    }
    if depth:
        charts["depth"] = lines(s.minutes, [Line(name, s.depth[name], f"s-{name}")
                                            for name in ("available", "scheduled", "retryable",
                                                         "running")],
                                f"Queue depth (peak per {per})", rng=rng)
    return charts
