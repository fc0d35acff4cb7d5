"""Enqueue inside Django's transaction: through Django's own psycopg connection when
Conveyor shares its PostgreSQL database (a rollback leaves no job; before the commit no
other connection sees it), after the commit when Conveyor has a database of its own
(another PostgreSQL database, or SQLite)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("django", reason="Django 6 needs Python >= 3.12: tests/contrib/django "
                    "run in .venv-django (make test-django)")

from typing import Any

from django.db import transaction
from django.tasks import TaskResultStatus
from django.tasks.exceptions import TaskResultDoesNotExist
from django.test import Client

from .conftest import Project


class Boom(Exception):
    pass


def jobs_of(backend: Any, task: str) -> list[int]:
    return [job.id for job in backend.app.list_jobs(task=task, limit=10_000)]


def test_shared_postgres_enqueue_is_part_of_the_transaction(project: Project, backends: Any) -> None:
    from shop.tasks import send_receipt

    backend = backends["default"]
    assert backend.joins_transaction
    with transaction.atomic():
        result = send_receipt.enqueue(7)
        assert result.id.isdigit()  # the job's id, known inside the transaction
        with pytest.raises(TaskResultDoesNotExist):  # Conveyor's own connection: not yet
            backend.get_result(result.id)
    assert backend.get_result(result.id).status == TaskResultStatus.READY

    with pytest.raises(Boom), transaction.atomic():
        rolled_back = send_receipt.enqueue(8)
        raise Boom
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result(rolled_back.id)


def test_savepoint_rollback_takes_only_its_job(project: Project, backends: Any) -> None:
    from shop.tasks import send_receipt

    backend = backends["default"]
    with transaction.atomic():
        kept = send_receipt.enqueue(9)
        with pytest.raises(Boom), transaction.atomic():
            dropped = send_receipt.enqueue(10)
            raise Boom
    backend.get_result(kept.id)
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result(dropped.id)


@pytest.mark.parametrize("alias", ["elsewhere", "lite"])
def test_own_database_enqueue_waits_for_the_commit(project: Project, backends: Any,
                                                   alias: str) -> None:
    from shop.tasks import whoami

    backend = backends[alias]
    assert not backend.joins_transaction
    task = whoami.using(backend=alias)
    before = jobs_of(backend, "shop.tasks.whoami")
    with transaction.atomic():
        result = task.enqueue("after commit")
        pending = result.id
        assert pending.startswith("pending-") and result.enqueued_at is None
        assert jobs_of(backend, "shop.tasks.whoami") == before  # nothing written yet
        with pytest.raises(TaskResultDoesNotExist, match="has not committed"):
            backend.get_result(pending)
    [new] = set(jobs_of(backend, "shop.tasks.whoami")) - set(before)
    assert result.id == str(new) and result.enqueued_at is not None  # updated in place
    assert backend.get_result(pending).id == str(new)

    with pytest.raises(Boom), transaction.atomic():
        task.enqueue("rolled back")
        raise Boom
    assert set(jobs_of(backend, "shop.tasks.whoami")) == {*before, new}

    outside = task.enqueue("autocommit")  # no transaction: written at once
    assert outside.id.isdigit()

    project.burst("--backend", alias)
    assert backend.get_result(result.id).return_value["note"] == "after commit"


def test_view_rollback_leaves_neither_order_nor_job(project: Project, backends: Any) -> None:
    from shop.models import Order

    backend = backends["default"]
    client = Client()
    jobs_before, orders_before = jobs_of(backend, "shop.tasks.send_receipt"), Order.objects.count()
    with pytest.raises(RuntimeError, match="on purpose"):
        client.post("/orders/", json.dumps({"email": "x@example.com", "total_cents": 5,
                                            "fail": True}), content_type="application/json")
    assert Order.objects.count() == orders_before
    assert jobs_of(backend, "shop.tasks.send_receipt") == jobs_before

    created = client.post("/orders/", json.dumps({"email": "y@example.com", "total_cents": 6}),
                          content_type="application/json")
    assert created.status_code == 201
    body = created.json()
    project.burst()
    seen = client.get(f"/results/{body['task_result']}/").json()
    assert seen["status"] == "SUCCESSFUL"
    assert seen["return_value"] == {"order": body["order"], "email": "y@example.com",
                                    "total_cents": 6}
    assert Order.objects.get(pk=body["order"]).receipt_sent
