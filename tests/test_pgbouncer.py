"""Conveyor through a real PgBouncer in transaction mode (Debian's ``pgbouncer``, started
by ``tests/_pgbouncer.py``), PostgreSQL only.

Without ``?conveyor_pooler=transaction`` server-side prepared statements collide (the
first test proves the setup reproduces the problem); with it, enqueue (sync, async,
bulk, the caller's connection), workers with acks, retries and snoozes, cron, the
dashboard and the CLI work, and wake-ups come from ``listen_url`` or from polling.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest

from conveyor import (
    Conveyor,
    DatabaseUnavailableError,
    JobState,
    Snooze,
    chain,
    chord,
    current_job,
    group,
)
from conveyor._runtime import Worker
from conveyor._storage import WakeHub, create_storage
from conveyor._storage.postgres.connection import LISTEN_ENV, config_from_url
from conveyor._storage.postgres.pools import _POOLER_WARNED

from . import _pgbouncer
from ._runtime_util import FAST, all_final, in_state, run_worker_until
from .conftest import truncate_conveyor_tables
from .test_cli import run_cli, run_json

pytestmark = pytest.mark.postgres

POOLER = "conveyor_pooler=transaction"


@pytest.fixture(scope="module")
def bouncer(postgres_db_url: str) -> Iterator[_pgbouncer.PgBouncer]:
    with _pgbouncer.start(postgres_db_url) as running:
        yield running


@pytest.fixture
def direct_url(postgres_db_url: str, bouncer: _pgbouncer.PgBouncer) -> str:
    truncate_conveyor_tables(postgres_db_url)
    return postgres_db_url


@pytest.fixture
def pooled_url(bouncer: _pgbouncer.PgBouncer, direct_url: str) -> str:
    """The test database through PgBouncer, with the pooler option."""
    return f"{bouncer.url_for(direct_url)}?{POOLER}"


def _listen_option(direct_url: str) -> str:
    return f"conveyor_listen_url={quote(direct_url, safe='')}"


def _run_two_workers_on_a_plain_url(url: str, caplog: pytest.LogCaptureFixture,
                                    jobs: int) -> list[str]:
    """``jobs`` jobs (sync, async and bulk enqueues) through two workers on one app whose
    URL does not name the pooler; every WARNING or worse the run logged."""
    _POOLER_WARNED.clear()  # once per process and URL: each test starts afresh
    app = Conveyor(url)

    @app.task
    async def work(n: int) -> int:
        return n

    async def main() -> None:
        for i in range(10):  # past every prepare threshold, on the sync connections
            work.enqueue(i)
        await asyncio.gather(*(work.enqueue_async(i) for i in range(40)))
        await app.enqueue_many_async([work.job(i) for i in range(jobs - 50)])
        config = dataclasses.replace(FAST, queues={"default": 20})
        second = Worker(app.registry, await app.storage(), config)
        running = asyncio.create_task(second.run())
        try:
            await run_worker_until(app, all_final(app), config=config, timeout=90)
        finally:
            second.request_stop()
            await asyncio.wait_for(running, timeout=30)
        counts = await app.count_jobs_async()
        assert counts["completed"] == jobs, counts
        await app.close_async()

    with caplog.at_level(logging.WARNING):
        asyncio.run(main())
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_plain_url_through_the_pooler_switches_to_the_pooler_mode_by_itself(
        bouncer: _pgbouncer.PgBouncer, direct_url: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """Issue 28 defect 7: without ``?conveyor_pooler=transaction`` two workers logged 329
    "ack flush of N failed" warnings for 2,000 jobs. The storage finds the pooler when it
    connects and says so once, naming the option; nothing fails on the way."""
    logged = _run_two_workers_on_a_plain_url(bouncer.url_for(direct_url), caplog, 2_000)
    assert len(logged) == 1, logged
    assert f"?{POOLER}" in logged[0] and "transaction pooler" in logged[0], logged


def test_when_the_check_at_connect_misses_the_pooler_its_errors_switch_modes(
        bouncer: _pgbouncer.PgBouncer, direct_url: str, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A pooler that hands the probe another server connection: the first prepared
    statement it refuses switches the storage to the pooler mode (one warning) and the
    statement runs again unprepared. One refused inside a transaction (a claim) cannot
    run again there: its caller logs it once and retries, as for any lost connection."""
    async def missed(*_: Any) -> bool:
        return False

    monkeypatch.setattr("conveyor._storage.postgres.pools.shares_server_sessions", missed)
    logged = _run_two_workers_on_a_plain_url(bouncer.url_for(direct_url), caplog, 1_000)
    switched = [m for m in logged if "turned off server-side prepared statements" in m]
    assert len(switched) == 1 and f"?{POOLER}" in switched[0], logged
    # An ack flush that meets the pooler before the switch is, like a claim, refused
    # inside its transaction and written again (once per worker at most); never the
    # defect's flood of "ack flush ... failed, retrying".
    flushes = [m for m in logged if "ack flush" in m]
    assert len(flushes) <= 2 and not [m for m in flushes if "failed" in m], logged


def test_on_a_direct_url_the_check_at_connect_finds_no_pooler(direct_url: str) -> None:
    app = Conveyor(direct_url)
    try:
        app.count_jobs()
        storage = app._sync(app.storage())
        assert not storage._config.pooled  # type: ignore[attr-defined]
    finally:
        app.close()


def test_enqueue_sync_async_bulk_and_the_callers_connection(
        bouncer: _pgbouncer.PgBouncer, pooled_url: str, direct_url: str) -> None:
    app = Conveyor(pooled_url)

    @app.task
    def record(n: int) -> None:
        pass

    try:
        for i in range(12):  # past every prepare threshold
            record.enqueue(i)
        app.enqueue_many([record.job(i) for i in range(2_000)])

        async def concurrently() -> None:
            for _ in range(3):
                await asyncio.gather(*(record.enqueue_async(i) for i in range(30)))
            await app.enqueue_many_async([record.job(i) for i in range(500)])

        app._sync(concurrently())
        # The caller's own connection through PgBouncer, with psycopg's default
        # prepare threshold: Conveyor's statements on it are never prepared.
        with psycopg.connect(bouncer.url_for(direct_url)) as conn:
            for i in range(8):
                with conn.transaction():
                    record.options(connection=conn).enqueue(i)
            with conn.transaction():
                app.enqueue_many([record.job(i) for i in range(10)], connection=conn)
        assert app.count_jobs()["available"] == 12 + 2_000 + 90 + 500 + 8 + 10
    finally:
        app.close()


def test_conveyors_statements_on_a_callers_connection_are_never_prepared(
        direct_url: str) -> None:
    """The caller's connection may reach a transaction pooler that Conveyor's own URL
    does not name, so Conveyor never prepares on it: with psycopg preparing every
    statement (``prepare_threshold=0``), single, bulk (INSERT and COPY), unique and
    workflow enqueues, sync and async, leave only the caller's own prepared statement."""
    app = Conveyor(direct_url)  # a direct URL: nothing tells Conveyor about a pooler

    @app.task
    def record(n: int) -> None:
        pass

    @app.task
    def collect(results: list[Any]) -> None:
        pass

    prepared = ("SELECT count(*) FROM pg_prepared_statements WHERE name LIKE '\\_pg3\\_%'")

    def count(conn: psycopg.Connection[Any]) -> int:
        row = conn.execute(prepared, prepare=False).fetchone()
        assert row is not None
        return int(row[0])

    async def on_async_connection() -> int:
        async with await psycopg.AsyncConnection.connect(direct_url,
                                                         prepare_threshold=0) as conn:
            async with conn.transaction():
                await conn.execute("SELECT 2")
            for i in range(3):
                async with conn.transaction():
                    await record.options(connection=conn).enqueue_async(i)
            async with conn.transaction():
                await app.enqueue_many_async([record.job(i) for i in range(300)],
                                             connection=conn)
                await app.enqueue_workflow_async(chain(record.job(1), record.job(2)),
                                                 connection=conn)
            cur = await conn.execute(prepared, prepare=False)
            row = await cur.fetchone()
            assert row is not None
            return int(row[0])

    try:
        with psycopg.connect(direct_url, prepare_threshold=0) as conn:
            with conn.transaction():
                conn.execute("SELECT 1")  # the caller's own: the count can see one
            assert count(conn) == 1
            for i in range(3):
                with conn.transaction():
                    record.options(connection=conn).enqueue(i)
                    record.options(connection=conn, unique_key=f"k{i}").enqueue(i)
            with conn.transaction():
                app.enqueue_many([record.job(i) for i in range(10)], connection=conn)
                app.enqueue_many([record.job(i) for i in range(300)], connection=conn)
                app.enqueue_workflow(chord(group(record.job(1), record.job(2)), collect),
                                     connection=conn)
            assert count(conn) == 1
        assert app._sync(on_async_connection()) == 1
        counts = app.count_jobs()
        assert counts["available"] == 3 + 3 + 10 + 300 + 2 + 3 + 300 + 1, counts
    finally:
        app.close()


def test_a_worker_completes_500_jobs_with_retries_and_snoozes(pooled_url: str) -> None:
    """Claims, acks (the reported stall), retries and snoozes, all through PgBouncer."""
    app = Conveyor(pooled_url)
    attempts: dict[int, int] = {}
    snoozes: list[int] = []

    @app.task
    async def work(n: int) -> int:
        return n

    @app.task(max_attempts=3, backoff=0)
    async def flaky(n: int) -> str:
        attempts[n] = current_job().attempt
        if current_job().attempt < 2:
            raise RuntimeError("first attempt fails")
        return "ok"

    @app.task(max_attempts=1)
    async def patient() -> str:
        snoozes.append(current_job().attempt)
        if len(snoozes) < 3:
            raise Snooze(0.05)
        return "done"

    async def main() -> None:
        await app.enqueue_many_async([work.job(i) for i in range(500)])
        await app.enqueue_many_async([flaky.job(i) for i in range(5)])
        job = await patient.enqueue_async()
        config = dataclasses.replace(FAST, queues={"default": 50})
        await run_worker_until(app, all_final(app), config=config, timeout=40)
        counts = await app.count_jobs_async()
        assert counts["completed"] == 506, counts
        final = await app.get_job_async(job.id)
        assert final is not None and final.result == "done" and final.attempt == 1
        await app.close_async()

    asyncio.run(main())
    assert attempts == {i: 2 for i in range(5)}
    assert snoozes == [1, 1, 1]


def test_cron_fires_each_tick_once_with_two_workers(pooled_url: str) -> None:
    """Leader election and the cron service through PgBouncer: two workers, one run per
    tick."""
    app, other = Conveyor(pooled_url), Conveyor(pooled_url)
    ticks: list[str] = []
    for each in (app, other):
        @each.periodic(cron="* * * * * *", misfire="skip", name="every_second")
        async def every_second() -> None:
            ticks.append(current_job().job.meta["tick"])

    async def completed_at_least(n: int) -> bool:
        return (await app.count_jobs_async())["completed"] >= n

    async def main() -> None:
        config = dataclasses.replace(FAST, cron_interval=0.2)
        second = Worker(other.registry, await other.storage(), config)
        task = asyncio.create_task(second.run())
        try:
            await run_worker_until(app, lambda: completed_at_least(3), config=config,
                                   timeout=20)
        finally:
            second.request_stop()
            await asyncio.wait_for(task, timeout=30)
        await app.close_async()
        await other.close_async()

    asyncio.run(main())
    assert len(ticks) == len(set(ticks)) >= 3, ticks


def test_dashboard_pages_render_through_pgbouncer(pooled_url: str) -> None:
    from conveyor.web import create_app

    from .web._seed import RELEASE, make_app, seed_jobs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    app = make_app(pooled_url)
    RELEASE.set()  # the seed's slow job must not block the test
    try:
        seed_jobs(app)
        job_id = app.list_jobs(limit=1)[0].id
        pages = {"/": ["Overview", "billing"], "/jobs": ["Jobs", "send_email"],
                 f"/jobs/{job_id}": [f"Job {job_id}", "Timeline"], "/queues": ["mail"],
                 "/failures": ["ValueError: card declined"], "/schedules": ["nightly-report"],
                 "/workers": ["Workers"]}
        with TestClient(create_app(app), base_url="http://localhost") as client:
            for _ in range(3):  # past the prepare threshold on the dashboard's pool
                for path, expected in pages.items():
                    response = client.get(path)
                    assert response.status_code == 200, (path, response.text[:500])
                    for text in expected:
                        assert text in response.text, (path, text)
    finally:
        RELEASE.clear()
        app.close()


def test_cli_status_through_pgbouncer(pooled_url: str, tmp_path: Path) -> None:
    app = Conveyor(pooled_url)

    @app.task
    def noop() -> None:
        pass

    try:
        for _ in range(3):
            noop.enqueue()
    finally:
        app.close()
    doc = run_json(tmp_path, "status", "--url", pooled_url)
    assert doc["states"]["available"]["count"] == 3, doc
    assert [q["counts"] for q in doc["queues"] if q["name"] == "default"], doc
    proc = run_cli(tmp_path, "status", "--url", pooled_url)  # the tables, too
    assert proc.returncode == 0 and "available" in proc.stdout, proc.stderr
    for command in (["migrate"], ["check"]):  # the migration lock is transaction-scoped
        proc = run_cli(tmp_path, *command, "--url", pooled_url)
        assert proc.returncode == 0, (command, proc.stdout, proc.stderr)


def test_a_dead_pooler_is_a_clear_error_and_loses_nothing() -> None:
    app = Conveyor(f"postgresql://postgres:secret@127.0.0.1:9/jobs?{POOLER}")

    @app.task
    def noop() -> None:
        pass

    try:
        with pytest.raises(DatabaseUnavailableError, match=r"127\.0\.0\.1:9\b") as info:
            noop.enqueue()
        assert "secret" not in str(info.value) and "conveyor_pooler" not in str(info.value)
    finally:
        app.close()


def test_polling_fallback_warns_once_and_runs_jobs_promptly(
        pooled_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """No LISTEN through the pooler: one WARNING saying what to do, and jobs enqueued by
    another process still start within about one poll interval."""
    app, producer = Conveyor(pooled_url), Conveyor(pooled_url)
    started: dict[int, float] = {}

    @app.task
    async def mark() -> None:
        started[current_job().job.id] = time.monotonic()

    @producer.task(name=mark.name)
    async def mark_remote() -> None:
        pass

    latencies: list[float] = []

    async def enqueue_and_wait(worker: Worker) -> None:
        storage = await app.storage()
        storage.wake_subscribe(lambda queue: None)()  # a second subscriber: no new warning
        for _ in range(3):
            sent = time.monotonic()
            job = await mark_remote.enqueue_async()
            deadline = sent + 10
            while job.id not in started and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert job.id in started, "the polling worker never ran the job"
            latencies.append(started[job.id] - sent)

    async def main() -> None:
        with caplog.at_level(logging.WARNING, logger="conveyor.postgres"):
            await run_worker_until(app, all_final(app), during=enqueue_and_wait, timeout=20)
        await app.close_async()
        await producer.close_async()

    asyncio.run(main())
    warnings_seen = [r for r in caplog.records if "LISTEN cannot run" in r.getMessage()]
    assert len(warnings_seen) == 1, [r.getMessage() for r in caplog.records]
    assert "CONVEYOR_LISTEN_URL" in warnings_seen[0].getMessage()
    poll = create_storage(pooled_url, WakeHub()).capabilities.poll_interval
    assert max(latencies) < poll + 1.5, latencies


def test_polling_wakes_this_process_on_its_own_enqueues(pooled_url: str) -> None:
    """Without LISTEN the storage wakes its own process's producers after each insert:
    sync (blocking and portal paths), async, bulk and unique inserts."""
    app = Conveyor(pooled_url)

    @app.task
    def noop() -> None:
        pass

    seen: list[str] = []
    unsubscribe = app._hub.subscribe(seen.append)
    try:
        for queue in ("first", "blocking"):  # the first opens the sync storage
            noop.options(queue=queue).enqueue()
            assert queue in seen, (queue, seen)
        app.enqueue_many([noop.options(queue="bulk").job()])
        app._sync(noop.options(queue="async").enqueue_async())
        noop.options(queue="unique", unique_key="k").enqueue()
        assert {"bulk", "async", "unique"} <= set(seen), seen
    finally:
        unsubscribe()
        app.close()


def test_listen_url_gives_notification_wake_ups(
        pooled_url: str, direct_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """With a direct listen URL, a job enqueued through PgBouncer by another app wakes
    this one by NOTIFY (no local wake-up happens across apps), and nothing warns."""
    listening = Conveyor(f"{pooled_url}&{_listen_option(direct_url)}")
    producer = Conveyor(pooled_url)

    @producer.task
    def ping() -> None:
        pass

    async def main() -> list[str]:
        seen: list[str] = []
        storage = await listening.storage()
        unsubscribe = storage.wake_subscribe(seen.append)
        try:
            await _wait(lambda: "*" in seen, 5)  # the listener is up (it wakes all first)
            await ping.options(queue="pinged").enqueue_async()
            await _wait(lambda: "pinged" in seen, 5)
        finally:
            unsubscribe()
            await listening.close_async()
            await producer.close_async()
        return seen

    with caplog.at_level(logging.WARNING, logger="conveyor.postgres"):
        seen = asyncio.run(main())
    assert "pinged" in seen
    assert not [r for r in caplog.records if "LISTEN" in r.getMessage()]


def test_a_dead_listen_url_falls_back_to_polling_and_says_so(
        pooled_url: str, caplog: pytest.LogCaptureFixture) -> None:
    dead = "postgresql://postgres@127.0.0.1:9/nowhere"
    app = Conveyor(f"{pooled_url}&{_listen_option(dead)}")

    @app.task
    async def noop() -> None:
        pass

    async def main() -> None:
        job = await noop.enqueue_async()
        with caplog.at_level(logging.WARNING, logger="conveyor.postgres"):
            await run_worker_until(app, in_state(app, job, JobState.COMPLETED), timeout=15)
        await app.close_async()

    asyncio.run(main())
    lost = [r.getMessage() for r in caplog.records if "LISTEN connection lost" in r.getMessage()]
    assert lost and "127.0.0.1:9" in lost[0], lost


@pytest.mark.parametrize(("query", "error"), [
    ("conveyor_pooler=sesion", "conveyor_pooler='sesion'"),
    ("conveyor_pooler=transaction&conveyor_listen_url=mysql%3A%2F%2Fx",
     "must be a postgresql:// URL"),
])
def test_bad_pooler_options_are_refused_clearly(query: str, error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        Conveyor(f"postgresql://postgres@127.0.0.1:5432/db?{query}")


def test_options_leave_the_rest_of_the_url_to_libpq(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LISTEN_ENV, "postgresql://postgres@127.0.0.1:5432/direct")
    config = config_from_url(
        f"postgresql://u:p@h:6432/db?application_name=web&{POOLER}&connect_timeout=3", 10)
    assert config.url == "postgresql://u:p@h:6432/db?application_name=web&connect_timeout=3"
    assert config.pooled and config.listen_url == "postgresql://postgres@127.0.0.1:5432/direct"
    assert not config_from_url("postgresql://h/db", 10, environ={}).pooled


async def _wait(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached within {timeout}s")
        await asyncio.sleep(0.01)


def test_a_pooler_error_on_any_path_switches_modes_once() -> None:
    """The sync enqueue's own connections meet the pooler through ``Errors.translate``
    too: its first prepared-statement error switches the storage (``on_pooler``)."""
    from conveyor._storage.postgres.connection import Errors

    found: list[str] = []
    errors = Errors("postgresql://u:secret@db:6432/app", on_pooler=lambda: found.append("x"))
    for error in (psycopg.errors.InvalidSqlStatementName('prepared statement "_pg3_1" '
                                                         'does not exist'),
                  psycopg.errors.ProtocolViolation('bind message supplies 5 parameters, but '
                                                   'prepared statement "_pg3_15" requires 1')):
        with (pytest.raises(DatabaseUnavailableError, match=re.escape(f"?{POOLER}")) as caught,
              errors.translate()):
            raise error
        assert "secret" not in str(caught.value)
    assert found == ["x", "x"]  # the storage's switch itself is idempotent
    errors.pooled = True
    with pytest.raises(psycopg.errors.InvalidSqlStatementName), errors.translate():
        raise psycopg.errors.InvalidSqlStatementName("gone")
