"""Tasks with rich and encrypted arguments, for the real `conveyor worker` processes of
tests/test_arguments.py. URL from $CONVEYOR_URL; keys from $CONVEYOR_ENCRYPTION_KEYS."""

from __future__ import annotations

import dataclasses
import enum
from datetime import date, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from conveyor import Conveyor

app = Conveyor()  # URL from $CONVEYOR_URL


class Tier(enum.Enum):
    GOLD = "gold"
    SILVER = "silver"


@dataclasses.dataclass(frozen=True)
class Money:
    amount: Decimal
    currency: str


@dataclasses.dataclass
class Line:
    sku: UUID
    price: Money
    tier: Tier


app.register_type(Money, lambda m: [str(m.amount), m.currency],
                  lambda v: Money(Decimal(v[0]), v[1]), tag="money")


def describe(**values: Any) -> dict[str, Any]:
    """What the handler received, as JSON: each value's type and its text."""
    return {name: [type(v).__name__, repr(v)] for name, v in values.items()}


@app.task(encrypt=True)
def charge(customer: UUID, lines: list[Line], due: date, at: datetime,
           total: Money, note: str | None = None) -> dict[str, Any]:
    return describe(customer=customer, lines=lines, due=due, at=at, total=total, note=note)
