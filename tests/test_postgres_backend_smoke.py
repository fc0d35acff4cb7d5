"""Smoke test of the PostgreSQL backend against scratch databases on the server the suite
found (``tests/_pg.py``, through the ``postgres_admin_url`` fixture): skipped loudly when
there is none, and failed instead when ``CONVEYOR_REQUIRE_POSTGRES=1``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from conveyor._errors import DatabaseUnavailableError, SchemaError
from conveyor._job import JobState
from conveyor._storage import (
    JobAck,
    JobAckManyParams,
    JobFetchAvailableParams,
    JobHeartbeatManyParams,
    JobInsert,
    JobLease,
    JobListParams,
    JobRescueExpiredParams,
    NodeUpsertParams,
    Storage,
    WakeHub,
    load_migrations,
)
from conveyor._storage.postgres import PostgresConfig, PostgresStorage

from . import _pg

ALL_VERSIONS = [m.version for m in load_migrations("postgres")]

#: Any well-formed URL, for checks that never connect.
SOME_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


@contextlib.contextmanager
def scratch_database(admin_url: str, suffix: str) -> Iterator[str]:
    name = f"conveyor_smoke_{os.getpid()}_{suffix}"
    ident = sql.Identifier(name)
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(ident))
    try:
        yield _pg.with_database(admin_url, name)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))


@pytest.fixture(scope="module")
def url(postgres_admin_url: str) -> Iterator[str]:
    with scratch_database(postgres_admin_url, "main") as db_url:

        async def migrate() -> None:
            storage = PostgresStorage(PostgresConfig(db_url), WakeHub())
            await storage.open(check_schema=False)
            try:
                assert [m.version for m in await storage.schema_pending()] == ALL_VERSIONS
                assert [m.version for m in await storage.migrate()] == ALL_VERSIONS
                assert await storage.migrate() == []
            finally:
                await storage.close()

        asyncio.run(migrate())
        yield db_url


def as_storage(storage: PostgresStorage) -> Storage:
    """Lets mypy check that PostgresStorage satisfies the Storage protocol."""
    return storage


def job(
    queue: str,
    task: str,
    *,
    priority: int = 0,
    max_attempts: int = 3,
    delay: float | None = None,
    run_at: datetime | None = None,
) -> JobInsert:
    return JobInsert(task, queue, "[1, 2]", '{"x": 1}', priority, max_attempts, '["t"]', "{}",
                     delay=delay, run_at=run_at)


def run(url: str, body: Callable[[PostgresStorage], Awaitable[None]]) -> None:
    async def main() -> None:
        storage = PostgresStorage(PostgresConfig(url, min_size=1, max_size=4), WakeHub())
        await storage.open()
        try:
            await body(storage)
        finally:
            await storage.close()

    asyncio.run(main())


async def wait_until(check: Callable[[], Awaitable[bool]], timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def test_insert_fetch_ack_stage(url: str) -> None:
    async def body(st: PostgresStorage) -> None:
        s = as_storage(st)
        jobs = await s.job_insert_many(
            [job("q1", "a"), job("q1", "b", delay=3600.0), job("q1", "c", priority=5)])
        assert [j.task for j in jobs] == ["a", "b", "c"]
        assert [j.state for j in jobs] == [JobState.AVAILABLE, JobState.SCHEDULED,
                                           JobState.AVAILABLE]
        assert jobs[0].args == [1, 2] and jobs[0].kwargs == {"x": 1} and jobs[0].tags == ["t"]
        assert jobs[1].scheduled_at > jobs[1].created_at + timedelta(minutes=59)

        claimed = await s.job_fetch_available(JobFetchAvailableParams("q1", 2, "node-1", 30.0))
        assert [j.task for j in claimed] == ["c", "a"]
        for j in claimed:
            assert j.state is JobState.RUNNING and j.attempt == 1 and j.lease_owner == "node-1"
            assert j.lease_token is not None and j.lease_token > 0
        c, a = claimed
        assert c.lease_token is not None and a.lease_token is not None

        stale = JobAck(c.id, c.lease_token + 1, JobState.COMPLETED, result_json="1")
        assert await s.job_ack_many(JobAckManyParams([stale])) == []
        done = JobAck(c.id, c.lease_token, JobState.COMPLETED, result_json='{"ok": true}')
        failed = JobAck(a.id, a.lease_token, JobState.RETRYABLE, delay=0.0,
                        error_json='{"error": "boom"}')
        assert await s.job_ack_many(JobAckManyParams([done, failed, done])) == [c.id, a.id]
        assert await s.job_ack_many(JobAckManyParams([done])) == []  # replayed: no effect

        got_c = await s.job_get(c.id)
        assert got_c is not None and got_c.state is JobState.COMPLETED
        assert got_c.result == {"ok": True} and got_c.finished_at is not None
        assert got_c.lease_token is None and got_c.lease_expires_at is None
        got_a = await s.job_get(a.id)
        assert got_a is not None and got_a.state is JobState.RETRYABLE
        assert got_a.errors == [{"error": "boom"}] and got_a.finished_at is None

        staged = await s.job_stage_due()
        assert ("q1", JobState.RETRYABLE) in [(j.queue, j.previous) for j in staged]
        got_a = await s.job_get(a.id)
        assert got_a is not None and got_a.state is JobState.AVAILABLE
        assert await s.job_get(10**12) is None

    run(url, body)


def test_run_at_and_empty_batches(url: str) -> None:
    async def body(s: PostgresStorage) -> None:
        later, earlier = datetime.now(UTC) + timedelta(hours=1), datetime(2000, 1, 1)
        jobs = await s.job_insert_many(
            [job("q5", "later", run_at=later), job("q5", "earlier", run_at=earlier),
             job("q5", "int", delay=60), job("q5", "float", delay=0.5)])
        assert [j.state for j in jobs] == [JobState.SCHEDULED, JobState.AVAILABLE,
                                           JobState.SCHEDULED, JobState.SCHEDULED]
        assert abs((jobs[0].scheduled_at - later).total_seconds()) < 0.001
        assert await s.job_insert_many([]) == []
        assert await s.job_ack_many(JobAckManyParams([])) == []
        result = await s.job_heartbeat_many(JobHeartbeatManyParams([], 30.0))
        assert result.held == frozenset()

    run(url, body)


def test_heartbeat_cancel_retry_list_count(url: str) -> None:
    async def body(s: PostgresStorage) -> None:
        queued, running = await s.job_insert_many([job("q2", "queued", delay=60.0), job("q2", "running")])
        [r] = await s.job_fetch_available(JobFetchAvailableParams("q2", 5, "node-2", 30.0))
        assert r.id == running.id and r.lease_token is not None and r.lease_expires_at
        beat = await s.job_heartbeat_many(JobHeartbeatManyParams(
            [JobLease(r.id, r.lease_token), JobLease(queued.id, 123)], 60.0))
        assert beat.held == {r.id} and beat.cancel_requested == frozenset()
        after = await s.job_get(r.id)
        assert after is not None and after.lease_expires_at is not None
        assert after.lease_expires_at > r.lease_expires_at

        cancelled = await s.job_cancel(queued.id)
        assert cancelled is not None and cancelled.state is JobState.CANCELLED
        assert cancelled.finished_at is not None and not cancelled.cancel_requested
        flagged = await s.job_cancel(r.id)
        assert flagged is not None and flagged.state is JobState.RUNNING
        assert flagged.cancel_requested and flagged.finished_at is None
        beat = await s.job_heartbeat_many(JobHeartbeatManyParams(
            [JobLease(r.id, r.lease_token)], 60.0))
        assert beat.cancel_requested == {r.id}
        # The cancel wins over the retry the worker asks for.
        ack = JobAck(r.id, r.lease_token, JobState.RETRYABLE, delay=5.0, error_json='{"e": 1}')
        assert await s.job_ack_many(JobAckManyParams([ack])) == [r.id]
        final = await s.job_get(r.id)
        assert final is not None and final.state is JobState.CANCELLED and final.finished_at
        assert await s.job_cancel(r.id) is None

        retried = await s.job_retry(r.id)
        assert retried is not None and retried.state is JobState.AVAILABLE
        assert not retried.cancel_requested and retried.finished_at is None
        assert retried.max_attempts == 3
        assert await s.job_retry(r.id) is None  # available: nothing to retry

        listed = await s.job_list(JobListParams(queue="q2"))
        assert [j.id for j in listed] == [running.id, queued.id]
        assert [j.id for j in await s.job_list(JobListParams(queue="q2", before_id=running.id))
                ] == [queued.id]
        assert [j.id for j in await s.job_list(JobListParams(
            queue="q2", state=JobState.CANCELLED))] == [queued.id]
        assert len(await s.job_list(JobListParams(limit=1))) == 1
        counts = await s.job_count_by_state(queue="q2")
        assert counts == {"cancelled": 1, "available": 1}
        assert sum((await s.job_count_by_state()).values()) >= 2

    run(url, body)


def test_rescue_expired_lease(url: str) -> None:
    async def body(s: PostgresStorage) -> None:
        again, last = await s.job_insert_many([job("q3", "again"), job("q3", "last", max_attempts=1)])
        claimed = await s.job_fetch_available(JobFetchAvailableParams("q3", 5, "node-3", 0.01))
        assert {j.id for j in claimed} == {again.id, last.id}
        rescued: set[int] = set()

        async def both_rescued() -> bool:
            rescued.update(await s.job_rescue_expired(JobRescueExpiredParams()))
            return rescued >= {again.id, last.id}

        await wait_until(both_rescued)
        got = await s.job_get(again.id)
        assert got is not None and got.state is JobState.AVAILABLE and got.attempt == 1
        assert got.lease_token is None and got.finished_at is None
        [error] = got.errors
        assert error["error"].startswith("lease expired") and error["attempt"] == 1
        assert error["node"] == "node-3" and error["at"].endswith("Z")
        datetime.fromisoformat(error["at"])
        dead = await s.job_get(last.id)
        assert dead is not None and dead.state is JobState.DISCARDED and dead.finished_at
        # The worker that lost the lease cannot write its late outcome.
        token = next(j.lease_token for j in claimed if j.id == again.id)
        assert token is not None
        late = JobAck(again.id, token, JobState.COMPLETED)
        assert await s.job_ack_many(JobAckManyParams([late])) == []
        retried = await s.job_retry(last.id)
        assert retried is not None and retried.max_attempts == 2

    run(url, body)


def test_nodes(url: str) -> None:
    async def body(s: PostgresStorage) -> None:
        await s.node_upsert(NodeUpsertParams("n1", "host", 42, '{"default": 4}', ttl=15))
        await s.node_upsert(NodeUpsertParams("n1", "host", 42, '{"default": 8}', ttl=15))
        async with await psycopg.AsyncConnection.connect(url) as conn:
            cur = await conn.execute("SELECT queues FROM conveyor_nodes WHERE id = 'n1'")
            assert await cur.fetchall() == [({"default": 8},)]
        await s.node_delete("n1")
        async with await psycopg.AsyncConnection.connect(url) as conn:
            cur = await conn.execute("SELECT count(*) FROM conveyor_nodes")
            assert await cur.fetchone() == (0,)

    run(url, body)


def test_transactional_insert(url: str) -> None:
    storage = PostgresStorage(PostgresConfig(url), WakeHub())
    with psycopg.connect(url) as conn:
        [rolled_back] = storage.job_insert_many_sync([job("tx", "x")], conn)
        assert rolled_back.state is JobState.AVAILABLE
        conn.rollback()
        storage.job_insert_many_sync([job("tx", "kept")], conn)
        conn.commit()

    async def body(s: PostgresStorage) -> None:
        assert [j.task for j in await s.job_list(JobListParams(queue="tx"))] == ["kept"]
        async with await psycopg.AsyncConnection.connect(url) as aconn:
            await s.job_insert_many([job("tx", "async")], aconn)
            await aconn.rollback()
            with psycopg.connect(url) as sync_conn:  # a sync connection from async code
                await s.job_insert_many([job("tx", "sync")], sync_conn)
        assert [j.task for j in await s.job_list(JobListParams(queue="tx"))] == ["sync", "kept"]
        with pytest.raises(TypeError, match="psycopg"):
            await s.job_insert_many([job("tx", "x")], object())

    run(url, body)


def test_listen_wakes_subscribers_only_on_commit(url: str) -> None:
    async def body(s: PostgresStorage) -> None:
        seen: list[str] = []
        unsubscribe = s.wake_subscribe(seen.append)

        async def saw(name: str) -> bool:
            return name in seen

        await wait_until(lambda: saw("*"), timeout=2.0)  # the listener is up
        async with await psycopg.AsyncConnection.connect(url) as conn:
            await s.job_insert_many([job("ghost", "x")], conn)
            await conn.rollback()
        await s.job_insert_many([job("wakeq", "x"), job("wakeq", "y")])
        await wait_until(lambda: saw("wakeq"), timeout=2.0)
        assert "ghost" not in seen and seen.count("wakeq") == 1

        # Kill the LISTEN connection: the listener reconnects and wakes everyone ("*").
        wildcards = seen.count("*")
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
            cur = await admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND query LIKE 'LISTEN%%'")
            assert await cur.fetchone() == (1,)

        async def rewoken() -> bool:
            return seen.count("*") > wildcards

        await wait_until(rewoken, timeout=2.0)
        await s.job_insert_many([job("after", "x")])
        await wait_until(lambda: saw("after"), timeout=2.0)
        unsubscribe()
        unsubscribe()

    run(url, body)


def test_schema_missing_is_refused(postgres_admin_url: str) -> None:
    with scratch_database(postgres_admin_url, "empty") as empty_url:
        storage = PostgresStorage(PostgresConfig(empty_url), WakeHub())
        with pytest.raises(SchemaError, match="conveyor migrate"):
            asyncio.run(storage.open())


def test_unreachable_database_is_one_clear_line() -> None:
    storage = PostgresStorage(
        PostgresConfig("postgresql://postgres:s3cret@127.0.0.1:1/x", connect_timeout=2.0),
        WakeHub(),
    )
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailableError) as info:
        asyncio.run(storage.open())
    message = str(info.value)
    assert "\n" not in message and "s3cret" not in message and "127.0.0.1:1" in message
    assert time.monotonic() - started < 5


def _allow_connections(admin_url: str, name: str, allow: bool) -> None:
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS {}").format(
            sql.Identifier(name), sql.SQL("true" if allow else "false")))
        if not allow:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))


def test_a_database_that_refuses_connections_is_reported_at_once_then_recovers(
        postgres_admin_url: str) -> None:
    """Once the pool's own attempts to connect fail, a call says "unavailable" in about
    half a second instead of waiting the pool's 30 s for a connection that cannot come;
    when the server takes connections again, calls work again."""
    with scratch_database(postgres_admin_url, "refusing") as db_url:
        name = psycopg.conninfo.conninfo_to_dict(db_url)["dbname"]

        async def main() -> list[float]:
            storage = PostgresStorage(PostgresConfig(db_url, min_size=1, max_size=2),
                                      WakeHub())
            await storage.open(check_schema=False)
            await storage.migrate()
            took: list[float] = []
            try:
                _allow_connections(postgres_admin_url, str(name), allow=False)
                try:
                    for _ in range(4):
                        started = time.monotonic()
                        with pytest.raises(DatabaseUnavailableError):
                            await storage.job_count_by_state()
                        took.append(time.monotonic() - started)
                finally:
                    _allow_connections(postgres_admin_url, str(name), allow=True)

                async def works() -> bool:
                    try:
                        await storage.job_count_by_state()
                    except DatabaseUnavailableError:
                        return False
                    return True

                await wait_until(works, timeout=60.0)
            finally:
                await storage.close()
            return took

        took = asyncio.run(main())
        # The first call meets its terminated connection; from then on each waits the
        # short outage wait, far below the pool's 30 s.
        assert max(took) < 5.0, took
        assert sorted(took)[len(took) // 2] < 2.0, took


def test_bad_channel_is_rejected() -> None:
    with pytest.raises(ValueError, match="channel"):
        PostgresStorage(PostgresConfig(SOME_URL, channel="x; DROP TABLE y"), WakeHub())


def test_times_come_back_in_utc_whatever_the_servers_zone(postgres_admin_url: str) -> None:
    """Conveyor's sessions run in UTC: under a database whose zone is a named one, a
    Job's times (enqueued, read back, claimed by a worker, through the sync enqueue's own
    connections too) are ``datetime.UTC``-aware, as on SQLite, and the same instants."""
    from conveyor import Conveyor, WorkerConfig, current_job

    with scratch_database(postgres_admin_url, "zone") as db_url:
        name = psycopg.conninfo.conninfo_to_dict(db_url)["dbname"]
        with psycopg.connect(postgres_admin_url, autocommit=True) as admin:
            admin.execute(sql.SQL("ALTER DATABASE {} SET timezone TO 'America/New_York'")
                          .format(sql.Identifier(str(name))))
        with psycopg.connect(db_url) as probe:
            assert probe.execute("SHOW timezone").fetchone() == ("America/New_York",)
        app = Conveyor(db_url)
        seen: list[tuple[datetime | None, ...]] = []
        try:
            app.migrate()

            @app.task
            def record(i: int) -> None:
                running = current_job().job
                seen.append((running.created_at, running.scheduled_at, running.attempted_at))

            before = datetime.now(UTC)
            job = record.enqueue(1)
            bulk = app.enqueue_many([record.job(i) for i in range(300)])  # COPY
            later = record.options(delay=60).enqueue(2)
            for made in (job, bulk[0], bulk[-1], later):
                stored = app.get_job(made.id)
                assert stored is not None
                for value in (made.created_at, made.scheduled_at, stored.created_at,
                              stored.scheduled_at):
                    assert value.tzinfo is UTC, value
                assert stored.created_at == made.created_at
            assert abs(job.created_at - before) < timedelta(minutes=5)
            assert later.scheduled_at - later.created_at == timedelta(seconds=60)
            async def work() -> None:  # the loop's storage closed on its own loop
                await app.run_worker(config=WorkerConfig(queues={"default": 10}, burst=True))
                await app.close_async()

            asyncio.run(work())
            assert len(seen) == 301
            assert all(t is not None and t.tzinfo is UTC for row in seen for t in row)
        finally:
            app.close()


def test_jobs_enqueued_on_a_callers_connection_come_back_in_utc(postgres_admin_url: str
                                                                  ) -> None:
    """A caller's own session may run in another zone: the Jobs its enqueue returns are
    ``datetime.UTC``-aware all the same (one job, a COPY batch, a unique job, a workflow;
    sync and async connections), the same instants the database stored."""
    from conveyor import Conveyor, Unique, chain

    with scratch_database(postgres_admin_url, "callerzone") as db_url:
        app = Conveyor(db_url)
        try:
            app.migrate()

            @app.task
            def record(i: int) -> None:
                pass

            @app.task(unique=Unique(key="k"))
            def once(i: int) -> None:
                pass

            def check(made: list[Any]) -> None:
                for job in made:
                    assert job.created_at.tzinfo is UTC and job.scheduled_at.tzinfo is UTC
                    stored = app.get_job(job.id)
                    assert stored is not None and stored.created_at == job.created_at

            with psycopg.connect(db_url) as conn:
                conn.execute("SET TIME ZONE 'America/New_York'")
                made = [record.options(connection=conn).enqueue(1),
                        once.options(connection=conn).enqueue(2)]
                made += app.enqueue_many([record.job(i) for i in range(300)], connection=conn)
                run = app.enqueue_workflow(chain(record.job(4), record.job(5)), connection=conn)
                made += run.jobs
                conn.commit()
            check(made)
            assert made[-1].scheduled_at.tzinfo is UTC

            async def on_async() -> list[Any]:
                aconn = await psycopg.AsyncConnection.connect(db_url)
                async with aconn:
                    await aconn.execute("SET TIME ZONE 'America/New_York'")
                    out = [await record.options(connection=aconn).enqueue_async(3)]
                    out += await app.enqueue_many_async(
                        [record.job(i) for i in range(300)], connection=aconn)
                    await aconn.commit()
                await app.close_async()
                return out

            check(asyncio.run(on_async()))
        finally:
            app.close()
