"""The SQLite storage thread hands results back to each caller's event loop in bulk (one
wake-up for all it settled before the loop ran): every caller still gets its own
result or its own error, from any number of loops, before and after a loop closes."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor._storage.sqlite.connection import SQLiteConfig, StorageThread
from conveyor._storage.wake import WakeHub

pytestmark = pytest.mark.sqlite


def _square(n: int) -> Callable[[sqlite3.Connection], int]:
    def run(conn: sqlite3.Connection) -> int:
        if n % 7 == 3:
            raise ValueError(n)
        return int(conn.execute("SELECT ? * ?", (n, n)).fetchone()[0])

    return run


async def _many(thread: StorageThread, count: int) -> list[object]:
    return await asyncio.gather(*(thread.call(_square(n)) for n in range(count)),
                                return_exceptions=True)


def _check(results: list[object]) -> None:
    for n, got in enumerate(results):
        if n % 7 == 3:
            assert isinstance(got, ValueError) and got.args == (n,)
        else:
            assert got == n * n


def test_each_caller_gets_its_own_result_from_any_loop(tmp_path: Path) -> None:
    thread = StorageThread(SQLiteConfig(str(tmp_path / "jobs.db")), WakeHub())
    asyncio.run(thread.start())
    try:
        _check(asyncio.run(_many(thread, 500)))
        others: list[list[object]] = []

        def other_loop() -> None:
            others.append(asyncio.run(_many(thread, 300)))

        side = [threading.Thread(target=other_loop) for _ in range(3)]
        for t in side:
            t.start()
        _check(asyncio.run(_many(thread, 300)))
        for t in side:
            t.join(timeout=60)
        assert len(others) == 3
        for results in others:
            _check(results)
        # the loops of the finished asyncio.run()s are forgotten once a new one calls
        _check(asyncio.run(_many(thread, 10)))
        assert len(thread._results) == 1
    finally:
        asyncio.run(thread.stop())
