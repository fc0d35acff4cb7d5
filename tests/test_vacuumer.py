"""The vacuumer (issue 15): on PostgreSQL the leader VACUUMs a Conveyor table once its
dead rows pass a bound, instead of waiting up to a minute for autovacuum; it holds back a
table an old transaction keeps from being cleaned, says clearly when it may not VACUUM,
and does nothing on SQLite (which keeps no dead rows). Real databases, real VACUUMs:
``pg_stat_user_tables.vacuum_count`` says whether one ran."""

# The statements below are built from this file's constants only.
# ruff: noqa: S608

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from conveyor import Conveyor, WorkerConfig
from conveyor._app.operations import Operations
from conveyor._runtime.vacuumer import VacuumConfig, Vacuumer
from conveyor._storage import Storage
from conveyor.cli.worker import _param_type

from ._runtime_util import FAST, all_final, run_worker_until
from .conftest import truncate_conveyor_tables

JOBS = "conveyor_jobs"


def pg(db_url: str, statement: str) -> list[tuple[object, ...]]:
    with psycopg.connect(db_url, autocommit=True) as conn:
        cur = conn.execute(statement)
        return cur.fetchall() if cur.description else []


def vacuum_count(db_url: str, table: str = JOBS) -> int:
    rows = pg(db_url, f"SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = '{table}'")
    return int(str(rows[0][0]))


def make_dead_rows(db_url: str, n: int) -> None:
    """``n`` jobs inserted and deleted on a connection of their own, closed at once: a
    backend reports its statistics when it exits."""
    pg(db_url, f"INSERT INTO conveyor_jobs (task, queue, args) "
               f"SELECT 't', 'default', '[]'::jsonb FROM generate_series(1, {n})")
    pg(db_url, "DELETE FROM conveyor_jobs")


async def dead_rows(storage: Storage, table: str = JOBS) -> int:
    return next((t.dead for t in await storage.table_dead_rows() if t.name == table), 0)


async def make_dead_rows_seen(storage: Storage, db_url: str, n: int = 3000) -> None:
    """``make_dead_rows``, then wait until the statistics ``storage`` reads report them."""
    make_dead_rows(db_url, n)

    async def reported() -> bool:
        return await dead_rows(storage) >= n
    await until(reported)


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


@pytest.fixture
def pg_url(postgres_db_url: str) -> str:
    """The session's PostgreSQL database, emptied."""
    truncate_conveyor_tables(postgres_db_url)
    return postgres_db_url


class Leader:
    def __init__(self, leads: bool) -> None:
        self.is_leader = leads


@pytest.mark.postgres
def test_past_the_bound_the_leader_vacuums_and_the_dead_rows_go(pg_url: str) -> None:
    app = Conveyor(pg_url)

    async def main() -> None:
        storage = await app.storage()
        await make_dead_rows_seen(storage, pg_url)
        before = vacuum_count(pg_url)
        # Below the bound, or not the leader: nothing.
        assert await Vacuumer(storage, None, VacuumConfig(1.0, 10**9)).run_once() == []
        assert await Vacuumer(storage, Leader(False), VacuumConfig(1.0, 1000)).run_once() == []
        assert await Vacuumer(storage, None, VacuumConfig(1.0, 0)).run_once() == []
        assert vacuum_count(pg_url) == before
        # Past it, on the leader: one VACUUM, and the statistics show the rows gone.
        vacuumed = await Vacuumer(storage, Leader(True), VacuumConfig(1.0, 1000)).run_once()
        assert JOBS in vacuumed
        assert vacuum_count(pg_url) == before + 1
        assert await dead_rows(storage) < 1000
        await app.close_async()

    asyncio.run(main())


@pytest.mark.postgres
def test_a_table_an_old_transaction_holds_is_held_back_then_cleaned(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = Conveyor(pg_url)

    async def main() -> None:
        storage = await app.storage()
        vacuumer = Vacuumer(storage, None, VacuumConfig(0.2, 1000))
        with psycopg.connect(pg_url) as old:
            old.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            old.execute("SELECT count(*) FROM conveyor_jobs").fetchone()  # its snapshot
            await make_dead_rows_seen(storage, pg_url)
            with caplog.at_level(logging.INFO, logger="conveyor.cluster"):
                assert await vacuumer.run_once() == [JOBS]  # removes nothing: held
            assert f"VACUUM of {JOBS} left" in caplog.text, caplog.text
            assert await dead_rows(storage) >= 3000
            count = vacuum_count(pg_url)
            assert await vacuumer.run_once() == []  # held back, no VACUUM
            assert vacuum_count(pg_url) == count
            old.rollback()

        async def cleaned() -> bool:
            return JOBS in await vacuumer.run_once() and await dead_rows(storage) < 1000
        with caplog.at_level(logging.INFO, logger="conveyor.cluster"):
            await until(cleaned)
        assert f"VACUUM of {JOBS} removes its dead rows again" in caplog.text
        await app.close_async()

    asyncio.run(main())


@pytest.mark.postgres
def test_a_role_that_does_not_own_the_tables_is_told_once_and_vacuums_nothing(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    role = f"conveyor_reader_{secrets.token_hex(4)}"
    pg(pg_url, f"CREATE ROLE {role} LOGIN")
    try:
        pg(pg_url, f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
        parts = urlsplit(pg_url)
        netloc = f"{role}@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
        app = Conveyor(urlunsplit(parts._replace(netloc=netloc)))

        async def main() -> None:
            storage = await app.storage()
            await make_dead_rows_seen(storage, pg_url)
            before = vacuum_count(pg_url)
            vacuumer = Vacuumer(storage, None, VacuumConfig(1.0, 1000))
            with caplog.at_level(logging.WARNING, logger="conveyor.cluster"):
                assert await vacuumer.run_once() == []
                assert await vacuumer.run_once() == []
            said = [r.message for r in caplog.records if "cannot VACUUM" in r.message]
            assert len(said) == 1 and JOBS in said[0] and "does not own" in said[0], said
            assert vacuum_count(pg_url) == before
            await app.close_async()

        asyncio.run(main())
    finally:
        pg(pg_url, f"DROP OWNED BY {role}")
        pg(pg_url, f"DROP ROLE {role}")


@pytest.mark.sqlite
def test_sqlite_lists_no_dead_rows_and_the_vacuumer_does_nothing(tmp_path: object) -> None:
    app = Conveyor(f"sqlite:///{tmp_path}/jobs.db")

    @app.task()
    def noop() -> None:
        return None

    async def main() -> None:
        storage = await app.storage()
        await app.enqueue_many_async([noop.job() for _ in range(500)])
        await Operations(app).delete_queue_jobs("default")
        assert await storage.table_dead_rows() == []
        assert await Vacuumer(storage, None, VacuumConfig(1.0, 1)).run_once() == []
        await app.close_async()

    asyncio.run(main())


@pytest.mark.postgres
def test_a_worker_vacuums_its_hot_table_while_it_works(pg_url: str) -> None:
    """The worker runs the service: with a low bound, jobs going through it leave enough
    dead rows for its leader to VACUUM while the jobs are still running."""
    app = Conveyor(pg_url)

    @app.task()
    async def noop(i: int) -> None:
        return None

    config: WorkerConfig = dataclasses.replace(
        FAST, vacuum_dead_rows=200, vacuum_interval=0.1, archive_interval=0.1)
    before = vacuum_count(pg_url)

    async def main() -> None:
        await app.enqueue_many_async([noop.job(i) for i in range(3000)])
        finished = all_final(app)

        async def done() -> bool:
            return await finished() and vacuum_count(pg_url) > before
        await run_worker_until(app, done, config, timeout=60.0)
        await app.close_async()

    asyncio.run(main())


@pytest.mark.parametrize("field, value", [
    ("vacuum_interval", 0.0), ("vacuum_interval", float("inf")), ("vacuum_dead_rows", -1),
    ("vacuum_dead_rows", True), ("vacuum_dead_rows", 1.5),
])
def test_bad_vacuum_settings_are_refused(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        dataclasses.replace(FAST, **{field: value})  # type: ignore[arg-type]


@pytest.mark.postgres
def test_table_vacuum_refuses_a_name_that_is_not_conveyors(pg_url: str) -> None:
    app = Conveyor(pg_url)

    async def main() -> None:
        storage = await app.storage()
        for name in ("pg_class", 'conveyor_jobs"; DROP TABLE x; --', "conveyor_"):
            with pytest.raises(ValueError, match="not a Conveyor table"):
                await storage.table_vacuum(name)
        await app.close_async()

    asyncio.run(main())


def test_the_worker_command_takes_the_vacuum_flags() -> None:
    """``conveyor worker --vacuum-dead-rows 0`` turns the service off; a negative bound
    and a zero interval are refused with the flag's name."""
    from click.testing import CliRunner

    from conveyor.cli import cli

    rows = _param_type("vacuum_dead_rows", int)
    assert rows.convert(0, None, None) == 0
    for flags in (["--vacuum-dead-rows", "-1"], ["--vacuum-interval", "0"],
                  ["--vacuum-dead-rows", "many"]):
        result = CliRunner().invoke(cli, ["worker", "--app", "nowhere:app", *flags])
        assert result.exit_code == 2, result.output
        assert flags[0] in result.output, result.output
