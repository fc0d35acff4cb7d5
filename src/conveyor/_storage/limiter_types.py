"""Limiters (``app.limiter``): the rows and parameters of their leased slots."""

from __future__ import annotations

import dataclasses
from datetime import datetime


@dataclasses.dataclass(frozen=True, slots=True)
class LimiterDeclareParams:
    """What a process declared a limiter as (``app.limiter``), kept so that the CLI and
    the dashboard can list limiters no worker loaded: one row per name, the last
    declaration wins."""

    name: str
    rate: str | None
    concurrency: int | None
    lease: float


@dataclasses.dataclass(frozen=True, slots=True)
class LimiterSlotParams:
    """One holder's slot of a concurrency limiter: ``limit`` holders at most per
    (name, key); the slot is leased for ``lease`` seconds (database clock) and the
    holder renews it while it holds."""

    name: str
    key: str
    holder: str
    limit: int = 1
    lease: float = 30.0


@dataclasses.dataclass(frozen=True, slots=True)
class LimiterHolder:
    """A live slot: who holds it, since when, and how long its lease still runs
    (seconds, measured on the database clock when read)."""

    name: str
    key: str
    holder: str
    acquired_at: datetime
    lease_expires_at: datetime
    remaining: float


@dataclasses.dataclass(frozen=True, slots=True)
class LimiterRow:
    """A declared limiter and its live holders (none for a rate limiter)."""

    name: str
    rate: str | None
    concurrency: int | None
    lease: float
    updated_at: datetime
    holders: tuple[LimiterHolder, ...] = ()
