"""SQLite moves a batch of plain completions to history in one statement outside a
transaction (``sqlite/retiring.py``), so that the copy and delete run while the loop
runs its jobs; these pin what that path must keep: which ids moved (also when only some
did), the three changes per moved row its count relies on, and that a write lock held
elsewhere leaves nothing written and the transactional path to take over."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Iterator

import pytest

from conveyor import Conveyor, JobState
from conveyor._storage import Storage, load_queries
from conveyor._storage.sqlite.batch import _acks_json
from conveyor._storage.sqlite.connection import SQLiteConfig, connect
from conveyor._storage.sqlite.retiring import Retiring

from .test_history import ids_in
from .test_retire import ack, claimed, done, run


@pytest.fixture
def sqlite_url(db_url: str) -> Iterator[str]:
    if not db_url.startswith("sqlite"):
        pytest.skip("SQLite's one-statement retire")
    yield db_url


def _mover(url: str, busy_timeout: float = 30.0) -> tuple[sqlite3.Connection, Retiring]:
    path = url.removeprefix("sqlite:///")
    conn = connect(SQLiteConfig(path, busy_timeout=busy_timeout))
    return conn, Retiring(load_queries("sqlite"), threading.Lock(), path)


def test_whole_and_partial_batches_report_the_ids_that_moved(sqlite_url: str) -> None:
    app = Conveyor(sqlite_url)

    @app.task
    async def work(i: int) -> None: ...

    async def body(s: Storage) -> None:
        await app.enqueue_many_async([work.job(i) for i in range(7)])
        jobs = await claimed(s)
        conn, mover = _mover(sqlite_url)
        try:
            whole = [done(j) for j in jobs[:3]]
            assert mover.move(conn, whole, _acks_json(whole), "node-a") == {
                j.id for j in jobs[:3]}
            before = conn.total_changes
            two = [done(j) for j in jobs[3:5]]
            assert mover.move(conn, two, _acks_json(two), "node-a") == {jobs[3].id, jobs[4].id}
            # the last batch's 3 notes cleared, then copy, note, delete: the count's rule
            assert conn.total_changes - before == 3 + 3 * 2
            lost = jobs[6].lease_token
            assert lost is not None
            mixed = [done(jobs[5]), done(jobs[6], lost + 1)]  # the second's lease was lost
            assert mover.move(conn, mixed, _acks_json(mixed), "node-a") == {jobs[5].id}
            assert mover.move(conn, [mixed[1]], _acks_json([mixed[1]]), "node-a") == set()
        finally:
            conn.close()
        assert ids_in(sqlite_url, "conveyor_jobs") == [jobs[6].id]
        assert ids_in(sqlite_url, "conveyor_jobs_history") == [j.id for j in jobs[:6]]
        got = await app.get_job_async(jobs[0].id)
        assert got is not None and (got.state, got.ran_on) == (JobState.COMPLETED, "node-a")

    run(app, body)


def test_a_write_lock_held_elsewhere_writes_nothing_then_the_ack_lands(sqlite_url: str) -> None:
    app = Conveyor(sqlite_url)

    @app.task
    async def work(i: int) -> None: ...

    async def body(s: Storage) -> None:
        await app.enqueue_many_async([work.job(i) for i in range(2)])
        jobs = await claimed(s)
        holder = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None,
                                 check_same_thread=False)
        conn, mover = _mover(sqlite_url, busy_timeout=0.05)
        try:
            holder.execute("BEGIN IMMEDIATE")  # another process's writer, mid-transaction
            acks = [done(j) for j in jobs]
            assert mover.move(conn, acks, _acks_json(acks), "node-a") is None
            assert ids_in(sqlite_url, "conveyor_jobs_history") == []

            def release() -> None:
                time.sleep(0.3)
                holder.execute("COMMIT")

            threading.Thread(target=release).start()
            assert sorted(await ack(s, acks)) == [j.id for j in jobs]  # waited, then moved
        finally:
            conn.close()
            deadline = time.monotonic() + 10
            while holder.in_transaction and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            holder.close()
        assert ids_in(sqlite_url, "conveyor_jobs") == []
        assert ids_in(sqlite_url, "conveyor_jobs_history") == [j.id for j in jobs]

    run(app, body)
