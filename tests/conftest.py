"""Shared test fixtures.

- ``db_url``: an empty database with the current schema, parametrised over ``sqlite`` and ``postgres``:
  every test that uses it (or ``app``) runs once per backend.
- ``app``: a ``Conveyor`` on ``db_url``, closed after the test.
- ``wf``: the workflow and batch tasks of ``tests/apps/workflows_app.py`` on ``db_url``.
- ``postgres_admin_url`` / ``postgres_db_url``: the Postgres server found by ``_pg`` and a
  migrated database of this session on it (dropped at the end).
- ``wait_for`` / ``wait_for_async``: poll a condition until it is truthy or a deadline passes.

Postgres is found as ``tests/_pg.py`` describes. When none is found its tests are skipped
loudly, unless ``CONVEYOR_REQUIRE_POSTGRES=1`` (CI), which turns that into failures.
Select backends with ``-m sqlite`` / ``-m postgres`` / ``-m "not postgres"``.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import secrets
import shutil
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast, overload

import psycopg
import pytest
from psycopg import sql

from conveyor import Conveyor

from . import _pg, _pgbouncer
from .apps.workflows_app import WorkflowTasks, build

T = TypeVar("T")

#: Environment variables of the outer shell that must not steer the tests.
LEAKY_ENV = ("CONVEYOR_URL", "CONVEYOR_APP")
#: Marks a skip or failure as caused by missing Postgres (for the summary's count).
PG_MISSING = "Postgres unavailable:"
POSTGRES_FIXTURES = frozenset({"postgres_admin_url", "postgres_db_url"})


# -- hooks ---------------------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    for name in LEAKY_ENV:
        os.environ.pop(name, None)
    config.addinivalue_line("markers", "slow: a slow test (deselect with -m 'not slow')")
    config.addinivalue_line("markers", "postgres: runs against PostgreSQL")
    config.addinivalue_line("markers", "sqlite: runs against SQLite")


def pytest_unconfigure(config: pytest.Config) -> None:
    _pg.shutdown()


def pytest_report_header(config: pytest.Config) -> list[str]:
    found = _pg.get()
    lines = [f"postgres: {found.describe()}", _pgbouncer.report_header()]
    if found.admin_url is None:
        outcome = "FAIL" if found.fatal or _pg.required() else "be SKIPPED"
        lines.append(f"postgres: !!! Postgres tests will {outcome} !!!")
    return lines


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & POSTGRES_FIXTURES and item.get_closest_marker("postgres") is None:
            item.add_marker(pytest.mark.postgres)


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    _pgbouncer.terminal_summary(terminalreporter)
    found = _pg.peek()
    if found is None or found.admin_url is not None:
        return

    def count(category: str) -> int:
        reports = terminalreporter.stats.get(category, [])
        return sum(1 for rep in reports if PG_MISSING in str(getattr(rep, "longrepr", "")))

    skipped, errored = count("skipped"), count("error") + count("failed")
    if not (skipped or errored):
        return
    tr = terminalreporter
    title = "POSTGRES TESTS FAILED" if errored else "POSTGRES TESTS WERE SKIPPED"
    tr.write_sep("!", title, red=True, bold=True)
    tr.write_line(f"{skipped} skipped, {errored} errored: no usable PostgreSQL server.")
    tr.write_line(f"Reason: {found.reason}")
    if found.fatal:
        tr.write_line(f"Fix: correct or unset {_pg.ENV_URL}.")
    else:
        tr.write_line(
            f"Fix: start PostgreSQL on {_pg.LOCAL_HOST}:{_pg.LOCAL_PORT}, install initdb/pg_ctl, "
            f"or set {_pg.ENV_URL}=postgresql://user@host:port/postgres. "
            f"{_pg.ENV_REQUIRE}=1 makes a missing server fail the run."
        )
    tr.write_sep("!", title, red=True, bold=True)


# -- Postgres ----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def postgres_admin_url() -> str:
    """URL of the ``postgres`` database on the discovered server (may create databases)."""
    found = _pg.get()
    if found.admin_url is None:
        message = f"{PG_MISSING} {found.reason}"
        if found.fatal or _pg.required():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return found.admin_url


@pytest.fixture(scope="session")
def postgres_db_url(postgres_admin_url: str) -> Iterator[str]:
    """A database of this session, migrated; dropped (WITH FORCE) at the end."""
    name = f"conveyor_test_{secrets.token_hex(6)}"
    with psycopg.connect(postgres_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = _pg.with_database(postgres_admin_url, name)
    try:
        migrate(url)
        yield url
    finally:
        with psycopg.connect(postgres_admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def migrate(url: str) -> None:
    """Bring the database at ``url`` to the current schema (public API only)."""
    migrator = Conveyor(url)
    try:
        migrator.migrate()
    finally:
        migrator.close()


def truncate_conveyor_tables(url: str) -> None:
    """Empty every ``conveyor_*`` table except ``conveyor_migrations``; reset identities."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '10s'")
        rows = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables"
            " WHERE table_type = 'BASE TABLE'"
            " AND table_schema NOT IN ('pg_catalog', 'information_schema')"
            " ORDER BY table_schema, table_name"
        ).fetchall()
        tables = [
            sql.Identifier(schema, table)
            for schema, table in rows
            if table.startswith("conveyor_") and table != "conveyor_migrations"
        ]
        if not tables:
            return
        statement = sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE").format(sql.SQL(", ").join(tables))
        try:
            conn.execute(statement)
        except psycopg.errors.LockNotAvailable as exc:
            raise RuntimeError(
                "could not empty the Postgres test database: a connection from an earlier "
                "test still holds a lock (an app or worker not closed?)"
            ) from exc


# -- backends --------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One SQLite file migrated once per session (about 80 ms a migration); each test's
    ``db_url`` copies it. Closing the migrator checkpoints the WAL into the file, so the
    file alone holds the schema."""
    path = tmp_path_factory.mktemp("sqlite-template") / "jobs.db"
    migrate(f"sqlite:///{path}")
    assert not path.with_name("jobs.db-wal").exists(), "the template's WAL was not checkpointed"
    return path


@pytest.fixture(
    params=[
        pytest.param("sqlite", marks=pytest.mark.sqlite, id="sqlite"),
        pytest.param("postgres", marks=pytest.mark.postgres, id="postgres"),
    ]
)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database with the current schema, on both backends: a new SQLite file
    (a copy of the session's migrated one, so a caller's own sqlite3 connection finds the
    tables), or the session's Postgres database truncated."""
    backend = cast(str, request.param)
    if backend == "sqlite":
        template = cast(Path, request.getfixturevalue("sqlite_template"))
        path = tmp_path / "jobs.db"
        shutil.copyfile(template, path)
        return f"sqlite:///{path}"
    url = cast(str, request.getfixturevalue("postgres_db_url"))
    truncate_conveyor_tables(url)
    return url


@pytest.fixture
def app(db_url: str) -> Iterator[Conveyor]:
    """A Conveyor on ``db_url``; closed after the test."""
    conveyor = Conveyor(db_url)
    try:
        yield conveyor
    finally:
        conveyor.close()


@pytest.fixture
def wf(db_url: str) -> Iterator[WorkflowTasks]:
    """The workflow and batch tests' tasks on a fresh app on ``db_url``; closed after."""
    tasks = build(db_url)
    try:
        yield tasks
    finally:
        tasks.app.close()


# -- waiting ---------------------------------------------------------------------------------


class WaitFor(Protocol):
    def __call__(
        self,
        predicate: Callable[[], T],
        timeout: float = ...,
        interval: float = ...,
        message: str = ...,
    ) -> T: ...


class WaitForAsync(Protocol):
    @overload
    async def __call__(
        self,
        predicate: Callable[[], Awaitable[T]],
        timeout: float = ...,
        interval: float = ...,
        message: str = ...,
    ) -> T: ...

    @overload
    async def __call__(
        self,
        predicate: Callable[[], T],
        timeout: float = ...,
        interval: float = ...,
        message: str = ...,
    ) -> T: ...


def _timed_out(predicate: object, timeout: float, message: str, last: object) -> AssertionError:
    what = message or getattr(predicate, "__qualname__", repr(predicate))
    return AssertionError(f"timed out after {timeout}s waiting for {what} (last value: {last!r})")


def wait_for(
    predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.01, message: str = ""
) -> T:
    """Call ``predicate`` until it returns something truthy and return that; raise
    AssertionError (with ``message``) once ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _timed_out(predicate, timeout, message, value)
        time.sleep(interval)


async def wait_for_async(
    predicate: Callable[[], Any],
    timeout: float = 10.0,
    interval: float = 0.01,
    message: str = "",
) -> Any:
    """Async ``wait_for``: ``predicate`` may be a plain or an async function."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _timed_out(predicate, timeout, message, value)
        await asyncio.sleep(interval)


@pytest.fixture(name="wait_for")
def wait_for_fixture() -> WaitFor:
    """``wait_for(lambda: app.get_job(id).state == "completed", timeout=5, message="...")``"""
    return wait_for


@pytest.fixture(name="wait_for_async")
def wait_for_async_fixture() -> WaitForAsync:
    """``await wait_for_async(some_async_fn, timeout=5)``; plain callables work too."""
    return cast(WaitForAsync, wait_for_async)
