"""Template filters: times, durations, counts and JSON, always as plain text (the
templates escape it)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

#: Characters of a JSON document shown on the detail page before it is cut.
MAX_SHOWN = 100_000


def when(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def stamp(value: Any) -> str:
    """An ISO 8601 string (as stored in a job's errors) shown like ``when``."""
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    return when(parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC))


def clock(ts: float) -> str:
    """Unix seconds as HH:MM (UTC), for chart axes."""
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M")


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


def ago(value: datetime | None, now: datetime | None = None) -> str:
    if value is None:
        return "-"
    delta = ((now or datetime.now(UTC)) - value).total_seconds()
    if abs(delta) < 1:
        return "now"
    return f"{seconds(delta)} ago" if delta > 0 else f"in {seconds(delta)}"


def number(value: float | int | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.1f}"
    return f"{int(value):,}"


def count(value: int, capped: bool = False) -> str:
    return f"{value:,}+" if capped else f"{value:,}"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def pretty(value: Any) -> str:
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)
    if len(text) > MAX_SHOWN:
        return text[:MAX_SHOWN] + f"\n… ({len(text) - MAX_SHOWN:,} more characters not shown)"
    return text


FILTERS = {"when": when, "seconds": seconds, "ago": ago, "number": number, "count": count,
           "percent": percent, "pretty": pretty, "clock": clock, "stamp": stamp}
