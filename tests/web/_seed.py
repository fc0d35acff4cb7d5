"""A realistic small world for dashboard tests and screenshots: tasks on three queues,
jobs in every state, failures of two kinds, a schedule, a live worker with a running
job, and an hour of metric history.

The history is recorded through the real ``Metrics`` collector with its clock set to
each past minute (and depth rows written as a worker's sample would be); everything
else goes through the public API and a real in-process worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import random
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg

from conveyor import Conveyor, Discard, JobState, WorkerConfig
from conveyor._metric_schema import minute_of
from conveyor._runtime import Worker
from conveyor._runtime.metrics import Metrics
from conveyor._storage import NodeUpsertParams

from .._runtime_util import FAST, all_final, run_worker_until

#: The slow task blocks on this until the test ends, so a job stays running.
RELEASE = threading.Event()


class _Leader:
    is_leader = True


def make_app(url: str) -> Conveyor:
    app = Conveyor(url)

    @app.task(queue="mail", max_attempts=5)
    def send_email(to: str, subject: str) -> None: ...

    @app.task
    def resize(path: str, width: int = 800) -> dict[str, int]:
        return {"width": width}

    @app.task(queue="billing", max_attempts=1)
    def charge(customer: str, card: dict[str, str], cents: int) -> None:
        if cents > 10_000:
            raise ValueError(f"card declined\ncustomer {customer}: insufficient funds")
        if cents < 0:
            raise Discard("negative amount")

    @app.task(queue="billing", max_attempts=3, backoff=3600)
    def sync_ledger(batch: int) -> None:
        raise ConnectionError("ledger API unreachable: connection reset by peer")

    @app.task(queue="default")
    def slow_export(name: str) -> None:
        RELEASE.wait(60)

    @app.periodic(cron="0 3 * * *", name="nightly-report")
    def nightly_report() -> None: ...

    return app


def seed_jobs(app: Conveyor) -> None:
    """Run a batch to completion, leaving failures, waiting jobs and a scheduled one."""
    t = app.tasks
    app.enqueue_many(
        [t["resize"].job(f"/img/{i}.png", width=200 + i) for i in range(30)]
        + [t["charge"].job(f"cus_{i}", {"last4": "4242", "token": f"tok_{i:04}"}, 20_000 + i)
           for i in range(6)]
        + [t["charge"].job("cus_ok", {"last4": "0002", "token": "tok_ok"}, 500),
           t["charge"].job("cus_neg", {"last4": "4000", "token": "tok_neg"}, -5)]
        + [t["sync_ledger"].job(b) for b in range(4)]
    )
    config = dataclasses.replace(FAST, queues={"default": 10, "billing": 4},
                                 metrics_retention=0.0)

    async def done() -> bool:
        counts = await app.count_jobs_async()
        return counts["available"] == 0 and counts["running"] == 0

    asyncio.run(_run(app, done, config))
    t["send_email"].enqueue("ada@example.com", subject="Welcome <b>aboard</b>")
    t["send_email"].enqueue("grace@example.com", subject="Your invoice")
    t["send_email"].options(delay=3600).enqueue("alan@example.com", subject="Reminder")
    t["resize"].enqueue("<script>alert('x')</script>", width=1)


async def _run(app: Conveyor, done: Any, config: WorkerConfig) -> None:
    try:
        await run_worker_until(app, done, config=config)
    finally:
        await app.close_async()


def seed_history(app: Conveyor, minutes: int = 60) -> None:
    """An hour of per-minute rollups: throughput with a bump, a few failures, latency."""
    rng = random.Random(42)
    now = time.time()
    clock = {"t": now}

    async def record() -> None:
        storage = await app.storage()
        metrics = Metrics(storage, _Leader(), 5.0, 86_400.0,
                          clock=lambda: clock["t"])
        for i in range(minutes, 0, -1):
            clock["t"] = now - 60 * i
            busy = 40 + 30 * math.sin(i / 9) + rng.randint(0, 12)
            for _ in range(int(busy)):
                metrics.record("default", "resize", "completed", rng.expovariate(1 / 0.08),
                               rng.expovariate(1 / (0.02 + 0.2 * (i % 17 == 0))))
            for _ in range(rng.choice([0, 0, 1, 2, 4]) if i % 13 else 9):
                metrics.record("billing", "charge", "retried", rng.uniform(0.2, 1.5), 0.05)
        await metrics.flush()
        await app.close_async()

    asyncio.run(record())
    rows = []
    for i in range(minutes, 0, -1):
        bucket = minute_of(now - 60 * i)
        available = int(max(0, 120 * math.sin(i / 11) + 40))
        for state, n in (("available", available), ("running", 8 + i % 3),
                         ("scheduled", 3), ("retryable", 4 if i < 40 else 1)):
            rows += [(bucket, "*", state, n), (bucket, "default", state, n)]
    _insert_depth(app.url, rows)


def _insert_depth(url: str, rows: list[tuple[float, str, str, int]]) -> None:
    if url.startswith("sqlite"):
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
            conn.executemany("INSERT OR REPLACE INTO conveyor_metrics_depth VALUES (?, ?, ?, ?)",
                             rows)
        return
    with psycopg.connect(url, autocommit=True) as pg, pg.cursor() as cur:
        cur.executemany("INSERT INTO conveyor_metrics_depth VALUES (to_timestamp(%s), %s, %s, %s) "
                        "ON CONFLICT DO NOTHING", rows)


@contextlib.contextmanager
def live_worker(app: Conveyor, queues: dict[str, int] | None = None) -> Iterator[Worker]:
    """A worker on its own thread and loop until the block ends (a live node, a leader,
    and a running ``slow_export`` job once one is enqueued)."""
    RELEASE.clear()
    ready = threading.Event()
    box: dict[str, Any] = {}
    config = dataclasses.replace(FAST, queues=queues or {"default": 4, "billing": 2},
                                 heartbeat_interval=0.5, lease_ttl=10.0)

    async def main() -> None:
        worker = Worker(app, await app.storage(), config)
        box["worker"], box["loop"] = worker, asyncio.get_running_loop()
        ready.set()
        try:
            await worker.run()
        finally:
            await app.close_async()

    thread = threading.Thread(target=asyncio.run, args=(main(),), name="seed-worker")
    thread.start()
    assert ready.wait(10), "worker did not start"
    try:
        yield box["worker"]
    finally:
        RELEASE.set()
        box["loop"].call_soon_threadsafe(box["worker"].request_stop)
        thread.join(30)


def add_follower_node(url: str, node_id: str = "follower-node") -> str:
    """A live node row that is not the leader (another worker's, as far as the pages can
    tell), written through a Conveyor of its own; call it off any running event loop."""
    async def main() -> None:
        other = Conveyor(url)
        try:
            await (await other.storage()).node_upsert(NodeUpsertParams(
                node_id, "elsewhere", 1, '{"default": 1}', ttl=600.0))
        finally:
            await other.close_async()

    asyncio.run(main())
    return node_id


def leader_rows(html: str) -> dict[str, bool]:
    """Per ``tr[data-node]`` row of the workers page: whether it carries the leader badge."""
    rows = re.findall(r'<tr data-node="([^"]+)"[^>]*>(.*?)</tr>', html, re.S)
    return {node: 'class="badge leader"' in body for node, body in rows}


def build_world(url: str) -> Conveyor:
    app = make_app(url)
    seed_jobs(app)
    seed_history(app)
    return app


__all__ = ["JobState", "add_follower_node", "all_final", "build_world", "leader_rows",
           "live_worker", "make_app"]
