"""The shop's jobs: charge an order, mail its receipt, cancel it if still unpaid after
30 minutes, and report the day's sales every hour.

Orders travel as what they are (a dataclass with a UUID and Decimal prices): Conveyor
stores them as tagged JSON and hands the handler the same types back.
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from uuid import UUID

from conveyor import Conveyor, Discard

app = Conveyor()  # $CONVEYOR_URL in production; the tests point it at a fresh database


@dataclasses.dataclass(frozen=True)
class Line:
    sku: str
    quantity: int
    unit_price: Decimal


@dataclasses.dataclass(frozen=True)
class Order:
    id: UUID
    email: str
    card: str
    lines: list[Line]

    @property
    def total(self) -> Decimal:
        return sum((line.unit_price * line.quantity for line in self.lines), Decimal("0"))


class GatewayDown(Exception):
    """The payment provider did not answer: worth retrying."""


class CardDeclined(Exception):
    """The bank said no: retrying cannot help."""


class Gateway:
    """Stands in for the payment provider's client."""

    def __init__(self) -> None:
        self.down = False
        self.charges: dict[UUID, Decimal] = {}
        self.cancelled: set[UUID] = set()
        self.receipts: list[str] = []

    def charge(self, order: Order) -> None:
        if self.down:
            raise GatewayDown("payment provider timed out")
        if order.card == "tok_declined":
            raise CardDeclined(order.card)
        self.charges[order.id] = order.total


gateway = Gateway()


@app.task(queue="payments", max_attempts=5, backoff=300)  # 5 minutes between attempts
def charge(order: Order) -> str:
    if order.id in gateway.charges:
        return "already charged"  # a retry after a lost reply must not charge twice
    try:
        gateway.charge(order)  # GatewayDown propagates: retried after the backoff
    except CardDeclined:
        raise Discard("card declined") from None  # no more attempts
    send_receipt.enqueue(order.id, order.email, order.total)
    return f"charged {order.total}"


@app.task(queue="mail")
def send_receipt(order_id: UUID, email: str, amount: Decimal) -> None:
    gateway.receipts.append(f"{email}: order {order_id} paid, {amount} EUR")


@app.task
def cancel_unpaid(order_id: UUID) -> str:
    if order_id in gateway.charges:
        return "paid"
    gateway.cancelled.add(order_id)
    return "cancelled"


@app.periodic(cron="0 * * * *")
def hourly_sales() -> str:
    return str(sum(gateway.charges.values(), Decimal("0")))


def checkout(order: Order) -> None:
    """What the web request does: two jobs, and the customer is answered at once."""
    charge.enqueue(order)
    cancel_unpaid.options(delay=30 * 60).enqueue(order.id)
