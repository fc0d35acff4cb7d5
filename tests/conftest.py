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

Parallel runs (``make test``: pytest-xdist, ``-n 2 --dist loadgroup``): each worker is a
pytest session of its own, so it gets its own Postgres database (named after the worker),
SQLite template and temporary directories; whatever listens picks a free port. A module
whose tests share an expensive module- or session-scoped fixture (a browser, a built wheel,
a PgBouncer) runs whole on one worker, set up once (``pytest_collection_modifyitems``);
heavy scenarios marked ``heavy`` (the chaos package) run one after another on one worker.
pytest-xdist 3.8 applies a group by renaming ``item._nodeid``, which pytest 9 no longer
reads, so the dev extra keeps pytest below 9 and the report header says when groups are
not honoured.
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
#: Session- or module-scoped fixtures cheap enough to set up once per xdist worker; a test
#: using any other such fixture is kept on one worker with the rest of its module.
CHEAP_SHARED_FIXTURES = frozenset(
    {*POSTGRES_FIXTURES, "sqlite_template", "tmp_path_factory", "worker_id", "testrun_uid"}
)
#: The xdist group of the ``heavy`` tests: one worker runs them one after another.
HEAVY_GROUP = "heavy"


# -- hooks ---------------------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    for name in LEAKY_ENV:
        os.environ.pop(name, None)
    config.addinivalue_line("markers", "slow: a slow test (deselect with -m 'not slow')")
    config.addinivalue_line("markers", "postgres: runs against PostgreSQL")
    config.addinivalue_line("markers", "sqlite: runs against SQLite")
    config.addinivalue_line(
        "markers", "heavy: a long, CPU-heavy scenario; under xdist only one runs at a time"
    )
    config.addinivalue_line("markers", "xdist_group(name): run on one xdist worker (loadgroup)")


def pytest_unconfigure(config: pytest.Config) -> None:
    _pg.shutdown()


def pytest_report_header(config: pytest.Config) -> list[str]:
    found = _pg.get()
    lines = [f"postgres: {found.describe()}", _pgbouncer.report_header()]
    if pytest.version_tuple >= (9,):
        lines.append("xdist: !!! pytest >= 9: xdist_group is not honoured, heavy scenarios "
                     "may run side by side (the dev extra pins pytest < 9) !!!")
    if found.admin_url is None:
        outcome = "FAIL" if found.fatal or _pg.required() else "be SKIPPED"
        lines.append(f"postgres: !!! Postgres tests will {outcome} !!!")
    return lines


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & POSTGRES_FIXTURES and item.get_closest_marker("postgres") is None:
            item.add_marker(pytest.mark.postgres)
        if item.get_closest_marker("xdist_group") is None:
            group = xdist_group_of(item)
            if group is not None:
                item.add_marker(pytest.mark.xdist_group(group))


def xdist_group_of(item: pytest.Item) -> str | None:
    """The xdist group an unmarked test belongs in: ``heavy`` for the heavy scenarios, its
    module for a test that shares an expensive module/session fixture (set up once, on one
    worker, instead of once per worker), else None (any worker)."""
    if item.get_closest_marker("heavy") is not None:
        return HEAVY_GROUP
    info = getattr(item, "_fixtureinfo", None)
    for name, defs in (getattr(info, "name2fixturedefs", None) or {}).items():
        if name in CHEAP_SHARED_FIXTURES:
            continue
        if any(d.scope in ("session", "package", "module") for d in defs):
            return item.nodeid.split("::", 1)[0]
    return None


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
    """A database of this session (of this xdist worker: its id is in the name), migrated;
    dropped (WITH FORCE) at the end."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    name = f"conveyor_test_{worker + '_' if worker else ''}{secrets.token_hex(6)}"
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
    """Empty every ``conveyor_*`` table except ``conveyor_migrations``; reset identities.

    Only the tables written since their last TRUNCATE are truncated (a TRUNCATE of all of
    them, about 25, cost 0.1-0.3 s a test under load: each makes new files). A table with
    no page (``pg_relation_size`` 0) was not written: no row, no dead row, no statistics
    to reset; a table emptied by DELETE still has pages (and dead rows) and is truncated.
    The sequences of the others are reset with ``setval``. When another connection holds a
    lock on one of the tables, all of them are truncated as before, which waits for it (up
    to 10 s) and then says so."""
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
        try:
            row = conn.execute(_LOCKED_BY_OTHERS).fetchone()
            if row is not None and not row[0]:
                probe = sql.SQL(" UNION ALL ").join(
                    sql.SQL("SELECT {} WHERE pg_relation_size({}::regclass) > 0").format(
                        sql.Literal(i), sql.Literal(table.as_string(conn))
                    )
                    for i, table in enumerate(tables)
                )
                tables = [tables[int(i)] for (i,) in conn.execute(probe).fetchall()]
                conn.execute(_RESET_SEQUENCES)
            if tables:
                conn.execute(
                    sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE").format(sql.SQL(", ").join(tables))
                )
        except psycopg.errors.LockNotAvailable as exc:
            raise RuntimeError(
                "could not empty the Postgres test database: a connection from an earlier "
                "test still holds a lock (an app or worker not closed?)"
            ) from exc


#: Whether another connection holds a lock on a ``conveyor_*`` table of this database.
_LOCKED_BY_OTHERS = """
SELECT EXISTS (
    SELECT FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
    WHERE l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.pid <> pg_backend_pid() AND c.relname LIKE 'conveyor\\_%'
)"""

#: Every used sequence owned by a ``conveyor_*`` table back to its start, as
#: ``TRUNCATE ... RESTART IDENTITY`` leaves it (``is_called`` false).
_RESET_SEQUENCES = """
SELECT setval(s.oid, q.seqstart, false)
FROM pg_class s
JOIN pg_sequence q ON q.seqrelid = s.oid
JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = s.oid
     AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')
JOIN pg_class t ON t.oid = d.refobjid
JOIN pg_sequences ps ON ps.schemaname = s.relnamespace::regnamespace::name
     AND ps.sequencename = s.relname
WHERE s.relkind = 'S' AND t.relname LIKE 'conveyor\\_%' AND t.relname <> 'conveyor_migrations'
  AND ps.last_value IS NOT NULL"""


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
