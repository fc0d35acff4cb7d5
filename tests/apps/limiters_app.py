"""Limiters used by real `conveyor worker` processes and a plain script
(tests/test_limiter_processes.py), on ``$CONVEYOR_URL``.

Every grant is written to ``$CONVEYOR_TEST_LEDGER`` as one line
``kind asked granted released pid holder`` (wall clock; ``released`` is "-" while
held), one ``os.write`` of an O_APPEND file, so lines of concurrent processes never
interleave. ``asked`` is when the caller asked, ``granted`` when the grant returned:
the grant itself happened in between.

As a script: ``python -m tests.apps.limiters_app rate N`` takes N starts of "slack";
``... hold`` takes one slot of "ocr", writes its line, and holds it until killed.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from conveyor import Conveyor

app = Conveyor(os.environ.get("CONVEYOR_URL", "sqlite:///limiters-unused.db"))
slack = app.limiter("slack", rate="10/s", wait=30.0, timeout=60.0)
ocr = app.limiter("ocr", concurrency=2, lease=2.0, wait=2.0, timeout=60.0)


def ledger(kind: str, asked: float, granted: float, released: float | None,
           holder: str = "-") -> None:
    end = "-" if released is None else f"{released:.6f}"
    line = f"{kind} {asked:.6f} {granted:.6f} {end} {os.getpid()} {holder}\n"
    fd = os.open(os.environ["CONVEYOR_TEST_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@app.task
async def post(n: int) -> int:
    asked = time.time()
    async with slack:
        ledger("rate", asked, time.time(), None)
    return n


@app.task
def scan(n: int) -> int:
    asked = time.time()
    with ocr.hold() as permit:
        granted = time.time()
        time.sleep(0.2)
        ledger("slot", asked, granted, time.time(), permit.holder)
    return n


def main(argv: list[str]) -> None:
    if argv[0] == "rate":
        for _ in range(int(argv[1])):
            asked = time.time()
            with slack:
                ledger("rate", asked, time.time(), None)
    elif argv[0] == "hold":
        asked = time.time()
        permit = ocr.acquire()
        ledger("held", asked, time.time(), None, permit.holder)
        asyncio.run(asyncio.sleep(3600))  # until killed; the portal's loop renews


if __name__ == "__main__":
    main(sys.argv[1:])
