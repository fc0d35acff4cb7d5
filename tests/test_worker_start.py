"""A worker whose start fails (a service's ``start()`` raises, as when the database is
down) leaves nothing behind in its process: ``run()`` raises that error, its SIGTERM and
SIGINT handlers are what they were before, its wake-up subscription is gone, and the
services whose start ran are stopped (one whose stop fails too is logged, not raised)."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Mapping

import pytest

from conveyor import Conveyor
from conveyor._runtime import Worker
from conveyor._runtime.service import Service

from ._runtime_util import FAST

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class DatabaseDown(Service):
    """Fails its start once the worker's heartbeat has written its node (a start that
    ran, whose stop must delete it), and fails its stop too (the database still away)."""

    name = "database-down"

    def __init__(self, app: Conveyor, worker: Worker) -> None:
        self.app, self.worker = app, worker
        self.seen_at_start: dict[str, object] = {}
        self.stop_calls = 0

    async def start(self) -> None:
        storage = await self.app.storage()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10.0
        while self.worker.node_id not in {node.id for node in await storage.node_list()}:
            assert loop.time() < deadline, "the heartbeat never wrote the worker's node"
            await asyncio.sleep(0.01)
        self.seen_at_start = {"handlers": {sig: signal.getsignal(sig) for sig in SIGNALS},
                              "subscribed": self.app._hub.has_subscribers}
        raise ConnectionError("database is down")

    async def run_once(self) -> None:
        return None

    async def stop(self) -> None:
        self.stop_calls += 1
        raise ConnectionError("database still down")


def test_a_failed_start_undoes_the_signals_the_wake_up_and_the_started_services(
        app: Conveyor, caplog: pytest.LogCaptureFixture) -> None:
    # A loop of its own, not asyncio.run(): the handlers before are the process's own
    # (asyncio.run()'s SIGINT handler, and the loop's own handlers, put back after a
    # worker run: tests/test_worker_signals.py).
    before = {sig: signal.getsignal(sig) for sig in SIGNALS}
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(_failed_start(app, caplog, before))
    finally:
        try:
            loop.run_until_complete(app.close_async())
        finally:
            loop.close()


async def _failed_start(app: Conveyor, caplog: pytest.LogCaptureFixture,
                        before: Mapping[signal.Signals, object]) -> None:
    worker = Worker(app.registry, await app.storage(), FAST)
    down = DatabaseDown(app, worker)
    worker.services.append(down)
    assert {sig: signal.getsignal(sig) for sig in SIGNALS} == before
    assert not app._hub.has_subscribers

    with caplog.at_level(logging.WARNING, logger="conveyor.worker"), \
            pytest.raises(ConnectionError, match="database is down"):
        await asyncio.wait_for(worker.run(), timeout=30)

    # What the failed start found in place (pytest runs this in the main thread)...
    assert down.seen_at_start["subscribed"] is True
    assert down.seen_at_start["handlers"] != before
    # ... and what run() left behind (checked on this loop: closing it would undo them).
    assert {sig: signal.getsignal(sig) for sig in SIGNALS} == before
    assert not app._hub.has_subscribers
    assert not worker.started.is_set()
    nodes = await (await app.storage()).node_list()
    assert worker.node_id not in {node.id for node in nodes}  # the heartbeat was stopped
    assert down.stop_calls == 1
    assert "database-down did not stop cleanly: database still down" in caplog.text
