"""ConveyorBackend against real Django and PostgreSQL: enqueue, results, states, errors,
priorities, run_after, async tasks, task context, and Django's validation."""

from __future__ import annotations

import pytest

pytest.importorskip("django", reason="Django 6 needs Python >= 3.12: tests/contrib/django "
                    "run in .venv-django (make test-django)")

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from django.core.exceptions import ImproperlyConfigured
from django.tasks import TaskResultStatus
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch

from conveyor import Conveyor, JobState
from conveyor.contrib.django import ConveyorBackend

from .conftest import Project


@dataclasses.dataclass
class Ran:
    """Jobs enqueued through Django, then one real burst worker."""

    ids: dict[str, str]
    order_id: int


@pytest.fixture(scope="module")
def ran(project: Project) -> Ran:
    from shop.models import Order
    from shop.tasks import charge, count_orders, send_receipt, whoami

    order = Order.objects.create(email="ada@example.com", total_cents=1250)
    ids = {
        "receipt": send_receipt.enqueue(order.pk).id,
        "charge": charge.enqueue(order.pk, card="4242").id,
        "count": count_orders.enqueue(min_total_cents=1000).id,
        "whoami": whoami.enqueue("hi").id,
        "low": whoami.using(priority=-100).enqueue("low").id,
        "high": whoami.using(priority=100).enqueue("high").id,
    }
    project.burst("-q", "default:1,reports:1")
    return Ran(ids, order.pk)


def test_a_task_runs_on_a_worker_and_its_result_is_successful(ran: Ran) -> None:
    from shop.models import Order
    from shop.tasks import send_receipt

    result = send_receipt.get_result(ran.ids["receipt"])
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"order": ran.order_id, "email": "ada@example.com",
                                   "total_cents": 1250}
    assert result.args == [ran.order_id] and result.kwargs == {}
    assert result.attempts == 1 and len(result.worker_ids[0]) > 0
    assert result.enqueued_at is not None and result.finished_at is not None
    assert result.started_at is not None and result.started_at <= result.finished_at
    assert result.errors == []
    assert Order.objects.get(pk=ran.order_id).receipt_sent  # the worker's ORM write


def test_a_failing_task_is_failed_with_its_exception_class_and_traceback(ran: Ran) -> None:
    from shop.tasks import PaymentDeclinedError, charge

    result = charge.get_result(ran.ids["charge"])
    assert result.status == TaskResultStatus.FAILED and result.is_finished
    [error] = result.errors
    assert error.exception_class_path == "shop.tasks.PaymentDeclinedError"
    assert error.exception_class is PaymentDeclinedError
    assert "card 4242 declined" in error.traceback and 'tasks.py", line' in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018


def test_async_task_in_its_queue_with_its_priority(ran: Ran, backends: Any) -> None:
    from shop.tasks import count_orders

    result = count_orders.get_result(ran.ids["count"])
    value: Any = result.return_value  # an async task's value (typed as its coroutine)
    assert result.status == TaskResultStatus.SUCCESSFUL and value >= 1
    assert result.task.queue_name == "reports" and result.task.priority == 50
    job = backends["default"].app.get_job(int(ran.ids["count"]))
    assert (job.queue, job.priority, job.task) == ("reports", 50, "shop.tasks.count_orders")


def test_task_context_and_priorities_run_higher_first(ran: Ran, backends: Any) -> None:
    from shop.tasks import whoami

    result = whoami.get_result(ran.ids["whoami"])
    assert result.return_value == {"note": "hi", "attempt": 1, "result_id": ran.ids["whoami"]}
    app = backends["default"].app
    high, low = (app.get_job(int(ran.ids[k])) for k in ("high", "low"))
    # Django's -100..100 is Conveyor's priority unchanged (higher first in both).
    assert (high.priority, low.priority) == (100, -100)
    assert high.attempted_at < low.attempted_at  # one at a time: -q default:1


def test_run_after_defers_and_a_cancelled_job_is_failed(project: Project, backends: Any) -> None:
    from shop.tasks import whoami

    later = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    result = whoami.using(run_after=later).enqueue("later")
    app = backends["default"].app
    job = app.get_job(int(result.id))
    assert job.state == JobState.SCHEDULED and job.scheduled_at == later
    project.burst()
    seen = whoami.get_result(result.id)
    assert seen.status == TaskResultStatus.READY and seen.task.run_after == later
    app.cancel_job(job.id)
    seen.refresh()
    assert cast(Any, seen).status == TaskResultStatus.FAILED
    assert seen.errors[0].exception_class_path == "conveyor._errors.Cancel"


def test_retries_show_ready_with_the_failed_attempt(project: Project, backends: Any) -> None:
    from shop.tasks import charge

    result = charge.using(backend="lite").enqueue(1, "0000")  # lite: MAX_ATTEMPTS 2
    project.burst("--backend", "lite")
    seen = backends["lite"].get_result(result.id)
    assert backends["lite"].app.get_job(int(result.id)).state == JobState.RETRYABLE
    assert seen.status == TaskResultStatus.READY and seen.attempts == 1
    assert seen.errors[0].exception_class_path == "shop.tasks.PaymentDeclinedError"


def test_aenqueue_and_aget_result(project: Project) -> None:
    from shop.tasks import whoami

    async def main() -> tuple[str, TaskResultStatus]:
        result = await whoami.aenqueue("async")
        return result.id, (await whoami.aget_result(result.id)).status

    result_id, status = asyncio.run(main())
    assert status == TaskResultStatus.READY and result_id.isdigit()


def count_jobs(backend: ConveyorBackend) -> int:
    return sum(backend.app.count_jobs().values())


def test_bad_input_gets_djangos_errors_and_writes_nothing(project: Project, backends: Any) -> None:
    from shop.tasks import send_receipt

    backend = backends["default"]
    untyped: Any = send_receipt  # the wrong calls below are the point
    before = count_jobs(backend)
    with pytest.raises(InvalidTask, match="Queue 'nope' is not valid"):
        send_receipt.using(queue_name="nope")
    for priority in (101, -101):
        with pytest.raises(InvalidTask, match="priority must be a whole number"):
            send_receipt.using(priority=priority)
    with pytest.raises(InvalidTask, match="aware"):
        send_receipt.using(run_after=datetime(2030, 1, 1))
    with pytest.raises(InvalidTask, match="100 years"):
        send_receipt.using(run_after=datetime(2999, 1, 1, tzinfo=UTC))
    with pytest.raises(InvalidTask, match="invalid queue name"):
        send_receipt.using(backend="elsewhere", queue_name="no spaces")
    with pytest.raises(TypeError, match="Unsupported type"):
        untyped.enqueue(object())
    with pytest.raises(TypeError, match="Unsupported type"):
        untyped.enqueue({1, 2})
    with pytest.raises(TypeError, match="not JSON-serialisable"):
        untyped.enqueue(float("nan"))  # JSON has no NaN (Conveyor's own check)
    with pytest.raises(TypeError, match="do not fit"):
        untyped.enqueue(1, 2)
    assert count_jobs(backend) == before


def test_unknown_results(project: Project, backends: Any, ran: Ran) -> None:
    from shop.tasks import charge

    backend = backends["default"]
    for bad in ("abc", "0", "-1", "99999999", str(2**63), "pending-nothing", "١٢"):
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(bad)
    with pytest.raises(TaskResultMismatch):
        charge.get_result(ran.ids["receipt"])
    native = Conveyor(project.database_url)
    try:
        @native.task
        def plain() -> None: ...

        job = plain.enqueue()
    finally:
        native.close()
    with pytest.raises(TaskResultDoesNotExist, match="not a Django task"):
        backend.get_result(str(job.id))


def test_backend_flags_and_options(project: Project) -> None:
    assert ConveyorBackend.supports_defer and ConveyorBackend.supports_async_task
    assert ConveyorBackend.supports_get_result and ConveyorBackend.supports_priority
    with pytest.raises(ImproperlyConfigured, match="unknown keys"):
        ConveyorBackend("x", {"OPTIONS": {"NOPE": 1}})
    with pytest.raises(ImproperlyConfigured, match="MAX_ATTEMPTS"):
        ConveyorBackend("x", {"OPTIONS": {"MAX_ATTEMPTS": 0}})
    bad = ConveyorBackend("x", {"OPTIONS": {"DATABASE": "missing"}})
    assert [m.id for m in bad.check()] == ["conveyor.E001"]


def test_a_dead_conveyor_database_is_a_clear_error(project: Project) -> None:
    from shop.tasks import whoami

    from conveyor import DatabaseUnavailableError

    dead = ConveyorBackend("dead", {"OPTIONS": {
        "URL": "postgresql://postgres@127.0.0.1:1/nothing?connect_timeout=2"}})
    try:
        with pytest.raises(DatabaseUnavailableError):
            dead.enqueue(whoami, ("lost?",), {})
        with pytest.raises(DatabaseUnavailableError):
            dead.get_result("1")
    finally:
        dead.close()
