"""The sync ``job.wait()`` is woken by the finish itself (PostgreSQL: the NOTIFY on the
finished channel; SQLite: this process's own final-state write), not by its re-check
poll: with re-checks 30 s apart, a wait still ends within seconds of the worker's ack."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from conveyor import Conveyor, Job
from conveyor._app import results
from conveyor._app.results import Waiter

from .conftest import wait_for
from .test_results import define, worker_thread

#: Far above what a woken wait takes, far below the re-check interval set here.
PROMPT_S = 10.0
RECHECK = (30.0, 30.0)


def test_a_sync_wait_is_woken_by_the_finish_not_by_a_recheck(
        app: Conveyor, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(results, "NOTIFIED_RECHECK", RECHECK)
    monkeypatch.setattr(results, "POLLED_RECHECK", RECHECK)
    reads = [0]
    read = Waiter._read

    async def counted(self: Waiter, *args: Any, **kwargs: Any) -> list[Job]:
        try:
            return await read(self, *args, **kwargs)
        finally:
            reads[0] += 1

    monkeypatch.setattr(Waiter, "_read", counted)
    job = define(app)["add"].enqueue(20, 22)
    box: dict[str, Job] = {}
    waiting = threading.Thread(target=lambda: box.update(done=job.wait(timeout=60)))
    waiting.start()
    try:
        # the job was read not final: from here only a wake-up (or a re-check) ends it
        wait_for(lambda: reads[0] >= 1, timeout=10, message="the wait's first read")
        assert waiting.is_alive()
        with worker_thread(app):
            started = time.monotonic()
            waiting.join(PROMPT_S)
            took = time.monotonic() - started
    finally:
        waiting.join(60)
    assert "done" in box, "the wait did not end"
    assert box["done"].result == 42
    assert took < PROMPT_S, f"woken after {took:.1f}s: by the re-check, not the finish"
