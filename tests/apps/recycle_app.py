"""Tasks run by real `conveyor worker` processes in tests/test_worker_recycle.py.

Handlers append ``event job_id pid`` lines to ``$CONVEYOR_TEST_LEDGER`` (one
``os.write`` of an O_APPEND file: lines of concurrent processes never interleave).
"""

from __future__ import annotations

import asyncio
import os
import re
import time

from conveyor import Chunk, ChunkJob, Conveyor, current_job

HELD: list[bytearray] = []


def ledger(event: str, job_id: int | None = None) -> None:
    line = f"{event} {current_job().id if job_id is None else job_id} {os.getpid()}\n"
    fd = os.open(os.environ["CONVEYOR_TEST_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def started(event: str, job_id: int | None = None) -> None:
    """``ledger(event)``, after an ``overlap`` line if a process that started this job
    before is still alive: the job would then run twice at once."""
    job_id = current_job().id if job_id is None else job_id
    path = os.environ["CONVEYOR_TEST_LEDGER"]
    with open(path) as f:
        before = {int(pid) for name, job, pid in (line.split() for line in f)
                  if name == event and int(job) == job_id and int(pid) != os.getpid()}
    for pid in before:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        ledger(f"overlap-{event}", job_id)
    ledger(event, job_id)


def _ran_before(event: str) -> bool:
    with open(os.environ["CONVEYOR_TEST_LEDGER"]) as f:
        return any(line.split()[:2] == [event, str(current_job().id)] for line in f)


def hold_the_gil() -> None:
    """Catastrophic backtracking: about a minute in C code that never releases the GIL,
    so the worker's own loop (its timeouts, recycler, heartbeat) cannot run either."""
    re.match(r"(a+)+$", "a" * 29 + "b")


def build(url: str | None = None) -> Conveyor:
    app = Conveyor(url) if url else Conveyor()

    @app.task(name="count")
    def count() -> None:
        time.sleep(0.02)
        ledger("run")

    @app.task(name="hog")
    def hog(mb: int) -> None:
        HELD.append(bytearray(mb * 1024 * 1024))  # touched: resident, kept by the process
        ledger("hog")

    @app.task(name="stuck", timeout=1.0, max_attempts=2, backoff=0.2)
    def stuck() -> None:
        ledger("stuck")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # ignores ctx.cancelled: only a kill ends it
            time.sleep(0.05)

    @app.task(name="wedged", timeout=1.0, max_attempts=1)
    def wedged() -> None:
        ledger("wedged")
        hold_the_gil()

    @app.task(name="gil", timeout=1.0, max_attempts=3, backoff=0.2)
    def gil() -> str:
        started("gil")
        if current_job().attempt == 1:  # wedged once: the retry succeeds
            hold_the_gil()
        return "ok"

    @app.task(name="gil_chunk", timeout=1.0, max_attempts=3, backoff=0.2,
              chunk=Chunk(size=2, wait=0.5))
    def gil_chunk(jobs: list[ChunkJob]) -> list[str]:
        for job in jobs:
            started("gil-chunk", job.id)
        if any(job.attempt == 1 for job in jobs):
            hold_the_gil()
        return ["ok"] * len(jobs)

    @app.task(name="sleeper")
    def sleeper(first: float, again: float) -> None:
        """Sleeps ``first`` seconds on its first run, ``again`` on a later one."""
        seconds = again if _ran_before("sleeper") else first
        started("sleeper")
        time.sleep(seconds)
        ledger("sleeper-done")

    @app.task(name="napper")
    async def napper(first: float, again: float) -> None:
        seconds = again if _ran_before("napper") else first
        started("napper")
        await asyncio.sleep(seconds)
        ledger("napper-done")

    @app.task(name="slow")
    def slow(seconds: float) -> None:
        started("slow")
        time.sleep(seconds)
        ledger("slow-done")

    return app


app = build()
