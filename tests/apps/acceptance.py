"""Tasks run by real `conveyor worker` processes in the acceptance tests.

Every run writes to a ledger file (outside the queue): "start|end job attempt pid".
"""

from __future__ import annotations

import asyncio
import os
import time

from conveyor import Conveyor, current_job

app = Conveyor()  # URL from $CONVEYOR_URL


def _ledger(event: str) -> None:
    job = current_job()
    line = f"{event} {job.id} {job.attempt} {os.getpid()}\n"
    fd = os.open(os.environ["CONVEYOR_TEST_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@app.task(max_attempts=5, backoff=0.1)
async def sleepy(seconds: float) -> int:
    _ledger("start")
    await asyncio.sleep(seconds)
    _ledger("end")
    return os.getpid()


@app.task(max_attempts=5, backoff=0.1)
def sleepy_sync(seconds: float) -> int:
    _ledger("start")
    time.sleep(seconds)
    _ledger("end")
    return os.getpid()
