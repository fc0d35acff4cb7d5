"""The example's tasks: plain Django tasks; nothing here names Conveyor."""

from __future__ import annotations

from typing import Any

from django.tasks import TaskContext, task

from .models import Order


class PaymentDeclinedError(Exception):
    """Raised by ``charge`` for a declined card."""


@task
def send_receipt(order_id: int) -> dict[str, Any]:
    order = Order.objects.get(pk=order_id)
    order.receipt_sent = True
    order.save(update_fields=["receipt_sent"])
    return {"order": order.pk, "email": order.email, "total_cents": order.total_cents}


@task
def charge(order_id: int, card: str) -> None:
    raise PaymentDeclinedError(f"card {card} declined for order {order_id}")


@task(queue_name="reports", priority=50)
async def count_orders(min_total_cents: int = 0) -> int:
    return await Order.objects.filter(total_cents__gte=min_total_cents).acount()


@task(takes_context=True)
def whoami(context: TaskContext[Any, Any], note: str) -> dict[str, Any]:
    return {"note": note, "attempt": context.attempt, "result_id": context.task_result.id}
