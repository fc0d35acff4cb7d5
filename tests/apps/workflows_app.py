"""Tasks of the workflow and batch tests (tests/test_workflows.py, test_batches.py).

``build(url)`` registers them on a fresh app; real ``conveyor worker`` processes load
``app`` (on ``$CONVEYOR_URL``). Handlers append ``event task job_id pid`` lines to
``$CONVEYOR_TEST_LEDGER`` when it is set (one O_APPEND write: lines never interleave).
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any

from conveyor import Conveyor, Discard, Unique, current_job

GATE_TIMEOUT = 30.0


def ledger(event: str) -> None:
    path = os.environ.get("CONVEYOR_TEST_LEDGER")
    if not path:
        return
    job = current_job()
    line = f"{event} {job.task} {job.id} {os.getpid()}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@dataclasses.dataclass
class WorkflowTasks:
    app: Conveyor
    step: Any
    fail: Any
    flaky: Any
    collect: Any
    gated: Any
    unique_step: Any


def build(url: str) -> WorkflowTasks:
    app = Conveyor(url)

    @app.task(queue="wf")
    def step(name: str) -> str:
        ledger("run")
        return f"{name}!"

    @app.task(queue="wf", max_attempts=1)
    def fail(name: str) -> str:
        ledger("run")
        raise Discard(f"{name} fails")

    @app.task(queue="wf", max_attempts=3, backoff=0)
    def flaky(name: str) -> str:
        """Fails its first attempt, completes the second."""
        ledger("run")
        if current_job().attempt < 2:
            raise RuntimeError(f"{name}: first attempt fails")
        return f"{name}!"

    @app.task(queue="wf")
    def collect(results: list[Any]) -> list[Any]:
        ledger("run")
        return results

    @app.task(queue="wf")
    def gated(gate: str) -> str:
        """Waits for the gate file (the test creates it after a worker was killed)."""
        ledger("start")
        deadline = time.monotonic() + GATE_TIMEOUT
        while not Path(gate).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        ledger("run")
        return "opened"

    @app.task(queue="wf", unique=Unique())
    def unique_step(name: str) -> str:
        return name

    return WorkflowTasks(app, step, fail, flaky, collect, gated, unique_step)


app = build(os.environ["CONVEYOR_URL"]).app if "CONVEYOR_URL" in os.environ else None
