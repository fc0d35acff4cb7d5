"""The example project as shipped, on SQLite (Django's database and Conveyor's own
file), driven only through ``manage.py``: migrate, enqueue (a commit and a rollback),
a real burst worker, results."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("django", reason="Django 6 needs Python >= 3.12: tests/contrib/django "
                    "run in .venv-django (make test-django)")

from .conftest import EXAMPLE, MANAGE, base_env

ENQUEUE = """
import json
from django.db import transaction
from shop.models import Order
from shop.tasks import charge, count_orders, send_receipt, whoami
with transaction.atomic():
    order = Order.objects.create(email="sam@example.com", total_cents=900)
    receipt = send_receipt.enqueue(order.pk)
    pending = receipt.id
try:
    with transaction.atomic():
        send_receipt.enqueue(order.pk)
        raise RuntimeError("roll back")
except RuntimeError:
    pass
print(json.dumps({"pending": pending, "receipt": receipt.id, "order": order.pk,
                  "charge": charge.enqueue(order.pk, "1111").id,
                  "count": count_orders.enqueue().id, "whoami": whoami.enqueue("x").id}))
"""

RESULTS = """
import json, sys
from django.tasks import default_task_backend as backend
ids = json.loads(sys.stdin.read())
out = {}
for name in ("receipt", "charge", "count", "whoami"):
    r = backend.get_result(ids[name])
    out[name] = {"status": r.status, "errors": [e.exception_class_path for e in r.errors],
                 "value": r.return_value if r.status == "SUCCESSFUL" else None}
out["jobs"] = sum(backend.app.count_jobs().values())
print(json.dumps(out))
"""


def manage(env: dict[str, str], *args: str, stdin: str = "") -> str:
    done = subprocess.run([sys.executable, str(MANAGE), *args], cwd=EXAMPLE, env=env,
                          input=stdin, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"manage.py {args[0]}: {done.stdout}\n{done.stderr}"
    return done.stdout


def test_example_on_sqlite(tmp_path: Path) -> None:
    env = base_env(DJANGO_SETTINGS_MODULE="exampleproject.settings",
                   EXAMPLE_DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
                   CONVEYOR_EXAMPLE_URL=f"sqlite:///{tmp_path / 'conveyor.db'}")
    manage(env, "migrate")
    assert (tmp_path / "conveyor.db").exists()  # Conveyor's schema, made by migrate
    ids = json.loads(manage(env, "shell", "--no-imports", "-c", ENQUEUE).strip().splitlines()[-1])
    assert ids["pending"].startswith("pending-") and ids["receipt"].isdigit()
    manage(env, "conveyor_worker", "--burst")
    seen = json.loads(manage(env, "shell", "--no-imports", "-c", RESULTS,
                             stdin=json.dumps(ids)).strip().splitlines()[-1])
    assert seen["receipt"] == {"status": "SUCCESSFUL", "errors": [], "value": {
        "order": ids["order"], "email": "sam@example.com", "total_cents": 900}}
    assert seen["charge"]["status"] == "FAILED"
    assert seen["charge"]["errors"] == ["shop.tasks.PaymentDeclinedError"]
    assert seen["count"] == {"status": "SUCCESSFUL", "errors": [], "value": 1}
    assert seen["whoami"]["value"]["attempt"] == 1
    assert seen["jobs"] == 4  # the rolled-back enqueue never reached Conveyor
