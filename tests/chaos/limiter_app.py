"""The tasks of the limiter scenario (tests/chaos/test_limiters.py): jobs that hold a
slot of a concurrency limiter while they work.

The app and its limiter are on ``$CONVEYOR_CHAOS_URL``: a limiter is bound to the app
that made it, and the harness starts workers with ``--url`` alone. Besides the chaos
ledger (``tests/chaos/app.py``: start, end, snooze, abort), every holder writes to
``$CONVEYOR_CHAOS_LEDGER.holds`` one line when its slot is granted and one when it
gives it back: ``granted|released <job> <attempt> <pid> <monotonic ns> <holder>``.
"""

from __future__ import annotations

import os
import time

from conveyor import Conveyor, Snooze, current_job

from .app import ledger

app = Conveyor(os.environ.get("CONVEYOR_CHAOS_URL") or None)
#: Three holders at most, cluster-wide; a dead holder's slot frees within 2 s.
ocr = app.limiter("ocr", concurrency=3, lease=2.0, wait=1.0)
CONCURRENCY = 3
_fd: int | None = None


def holds(event: str, holder: str) -> None:
    global _fd
    if _fd is None:
        _fd = os.open(os.environ["CONVEYOR_CHAOS_LEDGER"] + ".holds",
                      os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    job = current_job()
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    os.write(_fd, f"{event} {job.id} {job.attempt} {os.getpid()} {now} {holder}\n".encode())


@app.task(max_attempts=25, backoff=0.05)
def scan(seconds: float) -> int:
    """Hold one of the limiter's slots for ``seconds``; snoozed when none frees in 1 s."""
    ledger("start")
    try:
        permit = ocr.acquire()
    except Snooze:
        ledger("snooze")
        raise
    holds("granted", permit.holder)
    time.sleep(seconds)
    holds("released", permit.holder)
    permit.release()
    ledger("end")
    return os.getpid()
