"""The shop's jobs, tested with Conveyor's pytest plugin: each test gets the app on a
database of its own (SQLite, or PostgreSQL with CONVEYOR_TEST_DATABASE_URL)."""

from decimal import Decimal
from uuid import UUID

import pytest
from shop.tasks import Gateway, Line, Order, cancel_unpaid, charge, checkout, send_receipt

from conveyor import Conveyor, JobState
from conveyor.testing import VirtualClock, assert_enqueued, refute_enqueued

ORDER = Order(id=UUID("6f1c2b1e-3c2d-4f5e-8a7b-6c5d4e3f2a1b"), email="ada@example.com",
              card="tok_visa", lines=[Line("book", 2, Decimal("9.90")), Line("pen", 1, Decimal("2.00"))])


def test_checkout_enqueues_the_charge_and_the_timeout(conveyor_app: Conveyor) -> None:
    checkout(ORDER)
    assert_enqueued(charge, args=[ORDER], queue="payments", count=1)  # compared as stored
    (timeout,) = assert_enqueued(cancel_unpaid, args=[ORDER.id])
    assert timeout.state is JobState.SCHEDULED  # in 30 minutes
    refute_enqueued(send_receipt)  # nothing is charged yet


def test_inline_hands_the_handlers_the_real_types(conveyor_app: Conveyor, gateway: Gateway) -> None:
    with conveyor_app.inline():
        job = charge.enqueue(ORDER)
    assert (job.state, job.result) == (JobState.COMPLETED, "charged 21.80")
    assert gateway.charges == {ORDER.id: Decimal("21.80")}  # a Decimal, exact
    # the receipt, enqueued by the charge, ran inline too
    assert gateway.receipts == [f"ada@example.com: order {ORDER.id} paid, 21.80 EUR"]
    assert_enqueued(send_receipt, args=[ORDER.id, "ada@example.com", Decimal("21.80")],
                    state="completed", count=1)


def test_an_outage_is_retried_after_the_backoff(conveyor_app: Conveyor, conveyor_clock: VirtualClock,
                                                gateway: Gateway) -> None:
    gateway.down = True
    checkout(ORDER)
    [failed] = conveyor_app.drain(queues=["payments"]).retried
    assert "GatewayDown: payment provider timed out" in (failed.error or "")

    gateway.down = False
    conveyor_clock.advance(minutes=4)
    assert len(conveyor_app.drain(cron=False)) == 0  # the retry is due in 5 minutes
    conveyor_clock.advance(minutes=1)
    done = conveyor_app.drain(cron=False).completed
    assert [(o.task, o.attempt) for o in done] == [("charge", 2), ("send_receipt", 1)]


def test_a_declined_card_is_not_retried_and_the_order_is_cancelled(
        conveyor_app: Conveyor, conveyor_clock: VirtualClock, gateway: Gateway) -> None:
    declined = Order(id=UUID(int=7), email="bob@example.com", card="tok_declined", lines=[])
    checkout(declined)
    [outcome] = conveyor_app.drain(cron=False).discarded
    assert outcome.task == "charge" and "card declined" in (outcome.error or "")

    conveyor_clock.advance(minutes=30)
    [cancelled] = conveyor_app.drain(cron=False).completed
    assert (cancelled.task, cancelled.result) == ("cancel_unpaid", "cancelled")
    assert gateway.cancelled == {declined.id}


def test_the_hourly_report_sums_the_sales(conveyor_app: Conveyor, conveyor_clock: VirtualClock) -> None:
    conveyor_app.drain()  # declares the schedule, as a worker's start does
    with conveyor_app.inline():
        charge.enqueue(ORDER)
    conveyor_clock.advance(hours=1)
    [report] = conveyor_app.drain().completed
    assert (report.task, report.result) == ("hourly_sales", "21.80")


def test_what_cannot_be_stored_is_refused_at_enqueue(conveyor_app: Conveyor) -> None:
    with pytest.raises(TypeError, match=r"argument 'order' \(#0\) of task 'charge'"):
        charge.enqueue(object())  # type: ignore[arg-type]
    refute_enqueued(charge)  # nothing was written
