"""What the CLI's own tools (``conveyor bench``, ``conveyor demo``) need from the app,
through its public face: a worker run with a stop handle and a started signal
(``run_worker``), and every storage the app opens wrapped (``wrap_storage``), so a
benchmark counts round trips on every path without touching the app's private state."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

from conveyor import Conveyor, WorkerConfig
from conveyor._app import Storage
from conveyor.cli.bench import BenchApp


def test_run_worker_says_when_it_started_and_stops_on_its_handle(app: Conveyor) -> None:
    ran: list[int] = []

    @app.task
    async def note(i: int) -> None:
        ran.append(i)

    async def main() -> tuple[list[str], bool]:
        stop, said = asyncio.Event(), []
        started = asyncio.Event()

        def on_started() -> None:
            said.append("started")
            started.set()

        runner = asyncio.create_task(app.run_worker(
            {"default": 2}, stop=stop,
            on_started=on_started))
        await asyncio.wait_for(started.wait(), 30)
        await note.enqueue_async(1)
        await asyncio.wait_for(_until(lambda: ran == [1]), 30)
        stop.set()
        await asyncio.wait_for(runner, 30)
        await app.close_async()
        return said, runner.done()

    said, done = asyncio.run(main())
    assert said == ["started"] and done and ran == [1]


async def _until(check: Any) -> None:
    while not check():
        await asyncio.sleep(0.01)


def test_a_wrapped_storage_sees_the_sync_async_and_worker_paths(db_url: str) -> None:
    seen: collections.Counter[str] = collections.Counter()

    class Spy:
        def __init__(self, inner: Storage) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            seen[name] += 1
            return getattr(self.inner, name)

    app = Conveyor(db_url)
    app.wrap_storage(Spy)

    @app.task
    def ping() -> None:
        pass

    try:
        ping.enqueue()  # the sync API (its blocking path once open)
        ping.enqueue()
        app.enqueue_many([ping.job(), ping.job()])

        async def main() -> None:
            await ping.enqueue_async()
            await app.run_worker(config=WorkerConfig(burst=True))
            await app.close_async()

        asyncio.run(main())
        assert app.count_jobs()["completed"] == 5
    finally:
        app.close()
    assert seen["job_insert_many"] + seen["job_insert_many_blocking"] >= 3
    assert seen["job_fetch_available"] >= 1 and seen["job_ack_many"] >= 1


def test_bench_counts_round_trips_through_the_public_wrap(db_url: str) -> None:
    app = BenchApp(db_url)

    @app.task(queue="conveyor-bench")
    def noop() -> None:
        pass

    try:
        app.enqueue_many([noop.job() for _ in range(10)])
        app.count_jobs()
        asyncio.run(_burst(app))
    finally:
        app.close()
    assert sum(n for _, n, _ in app.acks) == 10
    assert app.calls["job_fetch_available"] >= 1 and app.calls["job_count_by_state"] >= 1


async def _burst(app: Conveyor) -> None:
    await app.run_worker({"conveyor-bench": 5}, config=WorkerConfig(burst=True))
    await app.close_async()
