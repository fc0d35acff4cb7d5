"""Numbers and durations as operators read them, in the terminal and on the dashboard
alike (``conveyor status`` and the overview page show the same figures the same way)."""

from __future__ import annotations

import math


def seconds(value: float | None) -> str:
    """A duration: 850 ms, 4.2 s, 3 min, 2.5 h, 3 d."""
    if value is None or math.isnan(value):
        return "-"
    value = abs(value)
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 60:
        return f"{value:.1f} s"
    if value < 3600:
        return f"{value / 60:.0f} min"
    if value < 86400:
        return f"{value / 3600:.1f} h"
    return f"{value / 86400:.1f} d"


def number(value: float | int | None) -> str:
    """Thousands separated; a fraction keeps one decimal (a per-minute rate)."""
    if value is None:
        return "-"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.1f}"
    return f"{int(value):,}"


def count(value: int, capped: bool = False) -> str:
    """A count that stopped at its cap reads ``100,000+``."""
    return f"{value:,}+" if capped else f"{value:,}"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


__all__ = ["count", "number", "percent", "seconds"]
