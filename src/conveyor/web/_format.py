"""Template filters: times, durations, counts and JSON, always as plain text (the
templates escape it). Numbers and durations are ``conveyor._format``'s, shared with
the CLI."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from .._format import count, number, percent, seconds

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


def ago(value: datetime | None, now: datetime | None = None) -> str:
    if value is None:
        return "-"
    delta = ((now or datetime.now(UTC)) - value).total_seconds()
    if abs(delta) < 1:
        return "now"
    return f"{seconds(delta)} ago" if delta > 0 else f"in {seconds(delta)}"


def pretty(value: Any) -> str:
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)
    if len(text) > MAX_SHOWN:
        return text[:MAX_SHOWN] + f"\n… ({len(text) - MAX_SHOWN:,} more characters not shown)"
    return text


FILTERS = {"when": when, "seconds": seconds, "ago": ago, "number": number, "count": count,
           "percent": percent, "pretty": pretty, "clock": clock, "stamp": stamp}
