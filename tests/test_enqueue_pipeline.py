"""Concurrent ``enqueue_async`` calls of one loop are written together (``_app/pipeline.py``):
each caller still gets its own Job, or its own error, exactly as if it had been alone;
unique keys stay exact inside a shared batch; a database that goes away fails every
waiting caller at once, with nothing half-written. Both backends, real databases."""

from __future__ import annotations

import asyncio
import collections
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from typing import Any

import psycopg
from psycopg import sql

from conveyor import Conveyor, DatabaseUnavailableError, Job, Unique
from conveyor._app import Storage
from conveyor.cli.bench import CountingStorage

from . import _pg
from ._runtime_util import aio

#: Callers at once: enough that most of them queue behind a write in flight.
CALLERS = 40

_PG_REFUSE = """
CREATE FUNCTION conveyor_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'refused: %', NEW.args; END $$;
CREATE TRIGGER conveyor_test_refuse BEFORE INSERT ON conveyor_jobs FOR EACH ROW
WHEN (NEW.task = 'refused') EXECUTE FUNCTION conveyor_test_refuse();
"""
_PG_ALLOW = ("DROP TRIGGER IF EXISTS conveyor_test_refuse ON conveyor_jobs;"
             " DROP FUNCTION IF EXISTS conveyor_test_refuse()")
_SQLITE_REFUSE = """
CREATE TRIGGER conveyor_test_refuse BEFORE INSERT ON conveyor_jobs
WHEN NEW.task = 'refused' BEGIN SELECT RAISE(ABORT, 'refused'); END
"""


@contextmanager
def refusing(db_url: str) -> Iterator[None]:
    """The database itself refuses any job of task ``refused`` (a trigger), so one job
    of a shared batch fails where the client could not have known."""
    if db_url.startswith("sqlite"):
        with closing(sqlite3.connect(db_url.removeprefix("sqlite:///"))) as conn:
            conn.execute(_SQLITE_REFUSE)
            conn.commit()
        yield
        return  # the file is the test's own
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(_PG_REFUSE)
    try:
        yield
    finally:
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute(_PG_ALLOW)


def counted(app: Conveyor) -> collections.Counter[str]:
    """Storage calls of ``app`` from now on (each one a round trip)."""
    calls: collections.Counter[str] = collections.Counter()
    app.wrap_storage(lambda inner: CountingStorage(inner, calls))
    return calls


@aio
async def test_coalesced_enqueues_each_get_their_own_job_or_their_own_error(
        app: Conveyor, db_url: str) -> None:
    calls = counted(app)

    @app.task
    def noop(i: int) -> None: ...

    @app.task(name="refused")
    def refused(i: int) -> None: ...

    with refusing(db_url):
        await noop.enqueue_async(-1)  # storage open: what follows is the pipeline's
        before = calls["job_insert_many"]
        out = await asyncio.gather(
            *(refused.enqueue_async(i) if i % 10 == 3 else noop.enqueue_async(i)
              for i in range(CALLERS)), return_exceptions=True)
    good = [o for o in out if isinstance(o, Job)]
    bad = [o for i, o in enumerate(out) if i % 10 == 3]
    assert all(isinstance(o, Exception) and "refused" in str(o) for o in bad), bad
    assert [j.args for j in good] == [[i] for i in range(CALLERS) if i % 10 != 3]
    assert len({j.id for j in good}) == len(good)
    for job in good:
        stored = await app.get_job_async(job.id)
        assert stored is not None and stored.args == job.args and stored.task == "noop"
    assert [j.task for j in await app.list_jobs_async(limit=1000)].count("refused") == 0
    # shared batches: the first write alone, the rest together, then one by one only
    # for the batch that held a refused job
    assert calls["job_insert_many"] - before < 2 * CALLERS


@aio
async def test_unique_keys_stay_exact_inside_a_shared_batch(app: Conveyor) -> None:
    """Plain jobs and unique ones of three keys in one burst; key 0 already exists."""
    @app.task(unique=Unique())
    def sync_user(user: int) -> None: ...

    @app.task
    def noop(i: int) -> None: ...

    existing = await sync_user.enqueue_async(0)
    out = await asyncio.gather(*(sync_user.enqueue_async(i % 3) if i % 2 else noop.enqueue_async(i)
                                 for i in range(CALLERS)))
    unique = [j for j in out if j.task == "sync_user"]
    assert [j.args[0] for j in unique] == [i % 3 for i in range(CALLERS) if i % 2]
    for key in (0, 1, 2):
        jobs = [j for j in unique if j.args[0] == key]
        assert len({j.id for j in jobs}) == 1, f"key {key}: one job for every caller"
        fresh = [j for j in jobs if not j.duplicate]
        assert len(fresh) == (0 if key == 0 else 1), f"key {key}: {jobs}"
    assert {j.id for j in unique if j.args[0] == 0} == {existing.id}
    plain = [j for j in out if j.task == "noop"]
    assert len({j.id for j in plain}) == len(plain) == CALLERS // 2
    counts = await app.count_jobs_async()
    assert counts["available"] == 3 + CALLERS // 2


class Unplugged:
    """A storage proxy whose inserts fail as a database that went away does, once
    ``away`` is set; ``tries`` counts the attempts."""

    def __init__(self, inner: Storage) -> None:
        self._inner, self.away, self.tries = inner, False, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def job_insert_many(self, *args: Any, **kwargs: Any) -> list[Job]:
        if self.away:
            self.tries += 1
            await asyncio.sleep(0.01)  # in flight: the other callers queue up
            raise DatabaseUnavailableError("cannot use the database: connection refused")
        return await self._inner.job_insert_many(*args, **kwargs)


@aio
async def test_a_database_gone_fails_every_waiting_caller_at_once(app: Conveyor) -> None:
    """One attempt per shared batch, not one per caller; each caller gets the error."""
    proxies: list[Unplugged] = []

    def wrap(inner: Storage) -> Storage:
        proxies.append(Unplugged(inner))
        return proxies[-1]

    app.wrap_storage(wrap)

    @app.task
    def noop(i: int) -> None: ...

    await noop.enqueue_async(-1)
    proxies[-1].away = True
    out = await asyncio.gather(*(noop.enqueue_async(i) for i in range(CALLERS)),
                               return_exceptions=True)
    assert all(isinstance(o, DatabaseUnavailableError) for o in out), out
    assert proxies[-1].tries <= 3, f"{proxies[-1].tries} attempts for {CALLERS} callers"
    assert (await app.count_jobs_async())["available"] == 1


def test_a_postgres_that_refuses_connections_fails_the_shared_batch_promptly(
        postgres_admin_url: str) -> None:
    """A real server: the database stops accepting connections while callers wait."""
    with _pg.scratch_database(postgres_admin_url, "conveyor_test_pipeline") as url:
        name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
        app = Conveyor(url)
        app.migrate()

        @app.task
        def noop(i: int) -> None: ...

        async def main() -> tuple[list[Any], float]:
            try:
                await noop.enqueue_async(-1)
                _allow_connections(postgres_admin_url, str(name), False)
                began = time.monotonic()
                out = await asyncio.gather(*(noop.enqueue_async(i) for i in range(CALLERS)),
                                           return_exceptions=True)
                return out, time.monotonic() - began
            finally:
                _allow_connections(postgres_admin_url, str(name), True)
                await app.close_async()

        out, took = asyncio.run(main())
        assert all(isinstance(o, DatabaseUnavailableError) for o in out), out
        assert took < 10, f"{took:.1f}s to fail {CALLERS} callers"
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT count(*) FROM conveyor_jobs").fetchone()
        assert row is not None and row[0] == 1  # nothing half-written
        app.close()


def _allow_connections(admin_url: str, name: str, allow: bool) -> None:
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS {}").format(
            sql.Identifier(name), sql.SQL("true" if allow else "false")))
        if not allow:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))


@aio
async def test_enqueues_in_a_callers_transaction_are_never_shared(
        app: Conveyor, db_url: str) -> None:
    """Pipelined calls and calls in two callers' transactions, all at once: each
    transactional job commits or rolls back with its own transaction alone (SQLite
    runs the sync connection inline; PostgreSQL async connections side by side)."""
    @app.task
    def noop(i: int) -> None: ...

    await noop.enqueue_async(-1)
    if db_url.startswith("sqlite"):
        path = db_url.removeprefix("sqlite:///")
        kept_conn = sqlite3.connect(path, isolation_level=None)
        dropped_conn = sqlite3.connect(path, isolation_level=None)
        connections: list[Any] = [kept_conn, dropped_conn]
    else:
        connections = [await psycopg.AsyncConnection.connect(db_url) for _ in range(2)]
    kept, dropped = connections
    try:
        if isinstance(kept, sqlite3.Connection):
            kept.execute("BEGIN IMMEDIATE")
            kept_job = await noop.options(connection=kept).enqueue_async(1000)
            kept.execute("COMMIT")
            dropped.execute("BEGIN IMMEDIATE")
            dropped_job = await noop.options(connection=dropped).enqueue_async(2000)
            dropped.execute("ROLLBACK")
            plain = await asyncio.gather(*(noop.enqueue_async(i) for i in range(CALLERS)))
        else:
            out = await asyncio.gather(
                noop.options(connection=kept).enqueue_async(1000),
                noop.options(connection=dropped).enqueue_async(2000),
                *(noop.enqueue_async(i) for i in range(CALLERS)))
            kept_job, dropped_job, plain = out[0], out[1], list(out[2:])
            await kept.commit()
            await dropped.rollback()
    finally:
        for conn in connections:
            result = conn.close()
            if asyncio.iscoroutine(result):
                await result
    stored = {j.id: j.args for j in await app.list_jobs_async(limit=1000)}
    assert stored.get(kept_job.id) == [1000]
    assert [2000] not in stored.values()  # SQLite may give its id to a later job
    assert all(stored.get(job.id) == job.args for job in plain)
    assert len(stored) == 2 + CALLERS and dropped_job.args == [2000]
