"""Periodic schedules: definitions, and which cron ticks are due under a misfire policy.

Cron parsing and daylight-saving rules come from ``cronsim`` (Debian cron semantics)
behind the three functions here. Ticks are instants (stored in UTC):

* spring forward: a tick in the skipped hour (02:30 on a day with no 02:30) runs once,
  at the first instant after the gap (03:00), so it is never lost;
* fall back: a tick at a fixed hour (02:30) runs once, at its first occurrence; a
  wildcard-hour expression (``*/30 * * * *``) runs in both passes of the repeated
  hour, since those are different instants 30 minutes apart.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

Misfire = Literal["skip", "run_once", "backfill"]
MISFIRE_POLICIES = ("skip", "run_once", "backfill")
#: A scan for due ticks never looks at more than this many.
MAX_TICKS = 1000


@dataclasses.dataclass(frozen=True, slots=True)
class Schedule:
    """A periodic job: run ``task`` with these arguments at every tick of ``cron``.

    Example: ``Schedule("cleanup", task="cleanup", cron="0 3 * * *", timezone="Europe/Paris")``
    """

    name: str
    task: str
    cron: str
    timezone: str = "UTC"
    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    queue: str | None = None
    priority: int | None = None
    misfire: Misfire = "run_once"
    backfill: int = 0

    def __post_init__(self) -> None:
        check_cron(self.cron, self.timezone)
        if self.misfire not in MISFIRE_POLICIES:
            raise ValueError(f"misfire must be one of {MISFIRE_POLICIES}, got {self.misfire!r}")
        if isinstance(self.backfill, bool) or not isinstance(self.backfill, int) or not (
            0 <= self.backfill <= MAX_TICKS
        ):
            raise ValueError(f"backfill must be an int from 0 to {MAX_TICKS}")


def check_cron(expr: str, timezone: str) -> None:
    """Raise ValueError for an expression or time zone that cannot be used."""
    zone = _zone(timezone)
    try:
        CronSim(expr, datetime.now(zone).replace(microsecond=0))
    except (CronSimError, TypeError, ValueError) as exc:
        raise ValueError(f"invalid cron expression {expr!r}: {exc}") from None


def _zone(timezone: str) -> ZoneInfo:
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise ValueError(f"unknown time zone {timezone!r}") from None


def next_tick(expr: str, timezone: str, after: datetime) -> datetime | None:
    """The first tick strictly after ``after``."""
    try:
        return next(CronSim(expr, after.astimezone(_zone(timezone)).replace(microsecond=0)))
    except StopIteration:
        return None


def due_ticks(
    expr: str, timezone: str, after: datetime, now: datetime, limit: int,
    not_before: datetime | None = None,
) -> list[datetime]:
    """Ticks t with ``after < t <= now`` (and ``t >= not_before``), newest first, at
    most ``limit``: walking back from now keeps a long outage cheap."""
    start = (now.replace(microsecond=0) + timedelta(seconds=1)).astimezone(_zone(timezone))
    ticks: list[datetime] = []
    for tick in CronSim(expr, start, reverse=True):
        if tick <= after or (not_before is not None and tick < not_before) or len(ticks) >= limit:
            break
        ticks.append(tick)
    return ticks


def ticks_to_run(
    expr: str, timezone: str, misfire: str, backfill: int,
    after: datetime, now: datetime, grace: float,
) -> tuple[list[datetime], datetime | None]:
    """Apply the misfire policy: (ticks to enqueue, oldest first; newest due tick).

    A tick within ``grace`` seconds of now is on time. Late ticks are missed:
    ``skip`` drops them, ``run_once`` runs the newest once, ``backfill`` runs the
    newest ``backfill`` of them (at least one). When ``after`` (the previous pass's
    tick) is itself within ``grace``, the schedulers were running and nothing was
    missed: every due tick runs, even two or more when a pass came a little late.
    """
    newest = due_ticks(expr, timezone, after, now, 1)
    if not newest:
        return [], None
    if misfire == "skip" or after >= now - timedelta(seconds=grace):
        chosen = due_ticks(expr, timezone, after, now, MAX_TICKS, now - timedelta(seconds=grace))
    elif misfire == "backfill":
        chosen = due_ticks(expr, timezone, after, now, max(backfill, 1))
    else:
        chosen = newest
    return sorted(chosen), newest[0]
