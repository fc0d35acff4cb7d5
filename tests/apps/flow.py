"""Tasks run by real `conveyor worker` processes in the flow-control tests
(tests/test_flow_processes.py).

``build(url)`` registers every task on a fresh app, so the test process gets an app on
its own database that knows the same tasks and limits as the workers (explain needs
them). The workers load ``app`` (no schedules) or ``cron_app`` (plus a schedule that
ticks every second), both on ``$CONVEYOR_URL``.

Handlers append one line per event to ``$CONVEYOR_TEST_LEDGER``:
``event task job_id key wall_time pid`` (one ``os.write`` of an O_APPEND file, so lines
of concurrent processes never interleave).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from conveyor import Conveyor, Task, Unique, current_job

#: How long a gated handler waits for its gate file before giving up.
GATE_TIMEOUT = 30.0


def ledger(event: str, key: object = "-") -> None:
    job = current_job()
    line = f"{event} {job.task} {job.id} {key} {time.time():.6f} {os.getpid()}\n"
    fd = os.open(os.environ["CONVEYOR_TEST_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@dataclasses.dataclass(frozen=True)
class Flow:
    """An app with the flow tests' tasks, each reachable by attribute."""

    app: Conveyor
    tick: Task[[], Any]
    rated: Task[[int], Any]
    capped: Task[[float], Any]
    per_user: Task[[str, float], Any]
    ctl: Task[[float], Any]
    unique: Task[[int], int]
    plain: Task[[int], int]
    gated: Task[[str, str], Any]
    slow_rate: Task[[int], Any]


def build(url: str | None = None, *, cron: bool = False) -> Flow:
    app = Conveyor(url)

    def flow_tick() -> None:
        ledger("tick", current_job().job.meta.get("tick"))

    if cron:
        tick = app.periodic(cron="* * * * * *", name="every-second", queue="cron")(flow_tick)
    else:
        tick = app.task(queue="cron")(flow_tick)

    @app.task(name="flow_rated", queue="rate", rate_limit="10/s")
    async def rated(i: int) -> None:
        ledger("start", i)

    @app.task(name="flow_capped", queue="caps", concurrency=2)
    async def capped(seconds: float) -> None:
        ledger("start")
        await asyncio.sleep(seconds)
        ledger("end")

    @app.task(name="flow_per_user", queue="caps", concurrency_key=lambda user, *_: user)
    async def per_user(user: str, seconds: float) -> None:
        ledger("start", user)
        await asyncio.sleep(seconds)
        ledger("end", user)

    @app.task(name="flow_ctl", queue="ctl")
    async def ctl(seconds: float) -> None:
        ledger("start")
        await asyncio.sleep(seconds)
        ledger("end")

    @app.task(name="flow_unique", queue="nowhere", unique=Unique(key=lambda n: f"round-{n}"))
    def unique(n: int) -> int:
        return n

    @app.task(name="flow_plain", queue="nowhere")
    def plain(n: int) -> int:
        return n

    @app.task(name="flow_gated", queue="explain", concurrency_key=lambda gate, user: user)
    async def gated(gate: str, user: str) -> None:
        ledger("start", user)
        deadline = time.monotonic() + GATE_TIMEOUT
        while not Path(gate).exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        ledger("end", user)

    @app.task(name="flow_slow_rate", queue="explain", rate_limit="1/m")
    async def slow_rate(i: int) -> None:
        ledger("start", i)

    return Flow(app, tick, rated, capped, per_user, ctl, unique, plain, gated, slow_rate)


app = build().app
cron_app = build(cron=True).app


def race_enqueue(url: str, rounds: int, barrier: Barrier, results: Any) -> None:
    """One of the unique-race processes: open the app, then per round wait for every
    process at the barrier and enqueue the round's key at once; report (round, how,
    job id, duplicate). Even rounds use ``Unique(key=...)``, odd rounds
    ``.options(unique_key=...)`` on a task without ``unique=``."""
    flow = build(url)
    try:
        flow.app.count_jobs()  # connect (and check the schema) before the race
        for n in range(rounds):
            barrier.wait(timeout=60)
            if n % 2 == 0:
                job = flow.unique.enqueue(n)
                how = "unique"
            else:
                job = flow.plain.options(unique_key=f"round-{n}").enqueue(n)
                how = "option"
            results.put((n, how, job.id, job.duplicate, os.getpid()))
    finally:
        flow.app.close()
