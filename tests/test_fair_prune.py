"""Idle fair keys are forgotten (docs/flow-control.md "Fair keys"), on both backends.

Every claim that serves a key upserts its row of ``conveyor_fair_keys``; with a key per
tenant or user the table would hold every key ever seen. The pruner deletes the rows of
keys at the default weight with no available job; a returning key then starts level
with the others, as a long-idle key with its row would."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from typing import Any

import psycopg
import pytest

from conveyor import Conveyor
from conveyor._runtime.pruner import Pruner


def keyed_app(url: str, order: list[str]) -> tuple[Conveyor, Any, Any]:
    """A fair queue with a keyed task (the key is the first argument) and a keyless one."""
    app = Conveyor(url)

    @app.task(queue="fair", fair_key=lambda tenant, *_, **__: tenant)
    def work(tenant: str, n: int) -> None:
        order.append(tenant)

    @app.task(queue="fair")
    def plain(n: int) -> None:
        order.append("")

    return app, work, plain


def fair_rows(url: str) -> dict[str, float]:
    """``{key: weight}`` of every row of ``conveyor_fair_keys`` (queue "fair"), read raw:
    the key '' too, which no listing shows."""
    query = "SELECT fair_key, weight FROM conveyor_fair_keys WHERE queue = 'fair'"
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            return {k: float(w) for k, w in conn.execute(query)}
        finally:
            conn.close()
    with psycopg.connect(url) as pg:
        return {k: float(w) for k, w in pg.execute(query).fetchall()}


def prune(app: Conveyor, limit: int = 1000) -> int:
    async def run() -> int:
        return await (await app.storage()).fair_key_prune(limit)

    return app._sync(run())  # the app's loop and storage


def test_idle_default_weight_keys_are_forgotten(db_url: str) -> None:
    order: list[str] = []
    app, work, plain = keyed_app(db_url, order)
    try:
        app.set_fair_weight("fair", "weighted", 2)
        app.enqueue_many([work.job(k, 0) for k in ("idle1", "idle2", "idle3", "weighted")])
        app.enqueue_many([work.job("busy", i) for i in range(20)] + [plain.job(0)])
        app.drain(max_jobs=8)  # every key served, "busy" keeps work
        assert set(fair_rows(db_url)) == {"idle1", "idle2", "idle3", "weighted", "busy", ""}
        assert prune(app, limit=2) == 2  # a bounded batch
        assert prune(app, limit=2) == 1  # the rest: a short batch ends the pass
        assert prune(app) == 0
        # kept: the key with work, the weighted key (configuration), the keyless row
        assert fair_rows(db_url) == {"busy": 1.0, "weighted": 2.0, "": 1.0}
        assert [(k.key, k.waiting) for k in app.list_fair_keys("fair")] == [
            ("busy", 17), ("weighted", 0)]
        app.drain()
        assert prune(app) == 1  # "busy", idle at last
        assert set(fair_rows(db_url)) == {"weighted", ""}
    finally:
        app.close()


def test_a_returning_key_is_served_in_its_turn(db_url: str) -> None:
    """c is forgotten while a and b are served on; back, it starts one unit behind
    them (as a key that kept its row would): neither starved nor favoured."""
    order: list[str] = []
    app, work, _ = keyed_app(db_url, order)
    try:
        app.enqueue_many([work.job("a", i) for i in range(20)])
        app.enqueue_many([work.job("b", i) for i in range(20)])
        app.enqueue_many([work.job("c", i) for i in range(2)])
        app.drain(max_jobs=6)
        assert sorted(order) == ["a", "a", "b", "b", "c", "c"]
        app.drain(max_jobs=10)  # a and b on to 7 jobs each, c idle
        assert prune(app) == 1
        assert set(fair_rows(db_url)) == {"a", "b"}
        app.enqueue_many([work.job("c", i) for i in range(10)])
        order.clear()
        app.drain(max_jobs=9)
        # c's next finish is 7 (start 6 = 7 - 1), a's and b's 8: c first, then turns
        assert order[0] == "c", order
        assert sorted(order) == ["a"] * 3 + ["b"] * 3 + ["c"] * 3, order
        order.clear()
        app.drain(max_jobs=12)
        assert sorted(order) == ["a"] * 4 + ["b"] * 4 + ["c"] * 4, order
    finally:
        app.close()


class Follower:
    is_leader = False


def test_the_pruner_forgets_idle_keys_in_batches(db_url: str,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    order: list[str] = []
    app, work, _ = keyed_app(db_url, order)
    try:
        app.enqueue_many([work.job(f"tenant-{i}", 0) for i in range(5)])
        app.drain()
        assert len(fair_rows(db_url)) == 5

        async def run(pruner_of: Any) -> int:
            return int(await pruner_of(await app.storage()).run_once())

        def pruner(leader: Any) -> Any:
            return lambda storage: Pruner(storage, leader, 60, completed_age=86400,
                                          discarded_age=86400, batch=2)

        assert app._sync(run(pruner(Follower()))) == 0
        assert len(fair_rows(db_url)) == 5  # only the leader prunes
        with caplog.at_level(logging.INFO, logger="conveyor.cluster"):
            assert app._sync(run(pruner(None))) == 0  # no job is old enough
        assert fair_rows(db_url) == {}  # batches of 2, 2 and 1
        assert "forgot 5 idle fair key(s)" in caplog.text
    finally:
        app.close()


@pytest.mark.postgres
def test_a_row_a_claim_holds_is_skipped_not_waited_on(postgres_db_url: str) -> None:
    """A claim locks its keys' rows (in key order); the pruner takes none it would wait
    for (SKIP LOCKED), so it never deadlocks with a claim and never stalls one."""
    from .conftest import truncate_conveyor_tables

    truncate_conveyor_tables(postgres_db_url)
    order: list[str] = []
    app, work, _ = keyed_app(postgres_db_url, order)
    try:
        app.enqueue_many([work.job(k, 0) for k in ("k1", "k2", "k3")])
        app.drain()
        with psycopg.connect(postgres_db_url) as holder:
            holder.execute("SELECT 1 FROM conveyor_fair_keys WHERE fair_key = 'k2' FOR UPDATE")
            done = threading.Event()
            result: list[int] = []

            def pruning() -> None:
                result.append(prune(app))
                done.set()

            threading.Thread(target=pruning, daemon=True).start()
            assert done.wait(30), "the pruner waited on a locked row"
            assert result == [2]
            holder.rollback()
        assert set(fair_rows(postgres_db_url)) == {"k2"}
        assert prune(app) == 1
    finally:
        app.close()


def test_claims_and_prunes_together_never_fail(db_url: str) -> None:
    """Claims serving many keys while the pruner deletes their rows: no deadlock, no
    error, every job run once (a claim re-creates a row the pruner deleted)."""
    order: list[str] = []
    app, work, _ = keyed_app(db_url, order)
    try:
        app.enqueue_many([work.job(f"t{i % 40}", i) for i in range(400)])

        async def both() -> int:
            storage = await app.storage()
            stop = asyncio.Event()

            async def pruning() -> int:
                total = 0
                while not stop.is_set():
                    total += await storage.fair_key_prune(5)
                    await asyncio.sleep(0)
                return total

            task = asyncio.ensure_future(pruning())
            try:
                await app.drain_async()
            finally:
                stop.set()
            return await task

        app._sync(both())
        assert len(order) == 400 and sorted(set(order)) == sorted(f"t{i}" for i in range(40))
        prune(app)
        assert fair_rows(db_url) == {}
    finally:
        app.close()
