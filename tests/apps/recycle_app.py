"""Tasks run by real `conveyor worker` processes in tests/test_worker_recycle.py.

Handlers append ``event job_id pid`` lines to ``$CONVEYOR_TEST_LEDGER`` (one
``os.write`` of an O_APPEND file: lines of concurrent processes never interleave).
"""

from __future__ import annotations

import os
import re
import time

from conveyor import Conveyor, current_job

HELD: list[bytearray] = []


def ledger(event: str) -> None:
    line = f"{event} {current_job().id} {os.getpid()}\n"
    fd = os.open(os.environ["CONVEYOR_TEST_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


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
        # catastrophic backtracking: minutes in C code that never releases the GIL, so
        # the worker's own loop (and its recycler) cannot run either
        re.match(r"(a+)+$", "a" * 40 + "b")

    @app.task(name="slow")
    def slow(seconds: float) -> None:
        ledger("slow")
        time.sleep(seconds)
        ledger("slow-done")

    return app


app = build()
