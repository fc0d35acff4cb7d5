"""A chunk task for the kill -9 test of tests/test_chunks_processes.py: its handler
notes the chunk it got in ``$CONVEYOR_TEST_LEDGER``, then waits (for the kill) unless
the job's argument says to return at once."""

from __future__ import annotations

import os
import time

from conveyor import Chunk, ChunkJob, Conveyor

app = Conveyor(os.environ.get("CONVEYOR_URL"))


@app.task(chunk=Chunk(size=10, wait=0.2), max_attempts=3)
def slow_chunk(jobs: list[ChunkJob]) -> list[int]:
    line = " ".join(str(j.id) for j in jobs) + f" {os.getpid()}\n"
    fd = os.open(os.environ["CONVEYOR_TEST_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    if not all(j.args[0] == "fast" for j in jobs):
        time.sleep(60)  # killed before this ends
    return [j.id for j in jobs]
