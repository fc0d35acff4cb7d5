"""Queue cool-downs (``Throttle(scope="queue")``): the rows and parameters."""

from __future__ import annotations

import dataclasses
from datetime import datetime


@dataclasses.dataclass(frozen=True, slots=True)
class QueueCooldownRow:
    """One queue's cool-down: no worker claims from ``queue`` until ``cool_until``.

    ``remaining`` is measured on the database clock when the row was read (negative once
    the cool-down ended); ``seconds`` is the current cool-down's length and ``streak`` how
    many cool-downs followed each other (see ``queue_cooldown_raise``).
    """

    queue: str
    cool_until: datetime
    seconds: float
    streak: int
    raised_at: datetime
    remaining: float

    @property
    def active(self) -> bool:
        return self.remaining > 0


@dataclasses.dataclass(frozen=True, slots=True)
class QueueCooldownRaiseParams:
    """A handler raised ``Throttle(retry_after=seconds, scope="queue")``; ``cap`` bounds
    how far repeated throttles grow the cool-down (unless ``seconds`` itself is longer)."""

    queue: str
    seconds: float
    cap: float
