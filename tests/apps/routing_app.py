"""Tasks run by real `conveyor worker` processes in the routing tests
(tests/test_routing_processes.py): each returns who ran it (pid, node, labels), so the
test reads from the jobs themselves which worker claimed what. ``app`` is on
``$CONVEYOR_URL``; ``build(url)`` gives the test process the same tasks."""

from __future__ import annotations

import os
from typing import Any

from conveyor import Conveyor, current_job


def _who() -> dict[str, Any]:
    ctx = current_job()
    return {"pid": os.getpid(), "node": ctx.node_id, "host": ctx.hostname,
            "labels": dict(ctx.labels)}


def build(url: str | None = None) -> Conveyor:
    app = Conveyor(url, routes={"mail.*": "mail"})

    @app.task(name="train", requires={"gpu": "a100"})
    def train(n: int) -> dict[str, Any]:
        return _who()

    @app.task(name="mail.send")
    def send_email(n: int) -> dict[str, Any]:
        return _who()

    @app.task(name="resize")
    def resize(n: int) -> dict[str, Any]:
        return _who()

    @app.task(name="report")
    def report(n: int) -> dict[str, Any]:
        return _who()

    return app


app = build(os.environ.get("CONVEYOR_URL"))
