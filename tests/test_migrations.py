"""Schema upgrades, and published migrations that never change.

Every earlier schema version is built by applying migrations 1..k only (and, for the
databases that applied migration 4 before the ``conveyor_queue_depth`` view was added
to it, the migration 4 that was first published: ``tests/fixtures/published/``). Each
is filled with jobs in every state (and nodes, schedules and queue settings where the
schema has them), then upgraded through the public path (``Conveyor(url).migrate()`` on
PostgreSQL, opening the storage on SQLite, which migrates itself). Nothing may be lost
or changed, the schema must equal a fresh one, a worker must run the available job,
and a second migrate must be a no-op.

A migration, once committed, is fixed: ``test_published_migrations_never_change``
compares every migration file with the one of the commit that first added it.
"""

# The statements below are put together from this file's constants only (placeholders,
# the dialect's clock expression, schema version numbers), never from input.
# ruff: noqa: S608

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from conveyor import Conveyor, JobState, WorkerConfig
from conveyor._storage import load_migrations

from . import _pg
from ._runtime_util import in_state, run_worker_until
from .conftest import migrate

REPO = Path(__file__).resolve().parents[1]
STORAGE = Path("src/conveyor/_storage")
PUBLISHED = Path(__file__).resolve().parent / "fixtures" / "published"
DIALECTS = ("sqlite", "postgres")
HEAD = len(load_migrations("sqlite"))
assert len(load_migrations("postgres")) == HEAD

#: Published migrations that differ from the commit that first added them: an explicit,
#: reviewed list. Nothing is ever added here; a change to a published schema is a new
#: migration.
EDITED_AFTER_PUBLICATION = {
    f"{dialect}/migrations/0004_cold_state_index.sql": (
        "published by d2364a5 (the cold state index); 671394e then added the "
        "conveyor_queue_depth view to it, which a database already at schema 4 never "
        "got. Migration 0007 creates the view; the published text is kept in "
        f"tests/fixtures/published/{dialect}/ for the upgrade tests."
    )
    for dialect in DIALECTS
}

#: (schema version, built with the migration 4 first published instead of today's)
CASES = [(k, False) for k in range(1, HEAD)] + [(k, True) for k in range(4, HEAD)]


def _case_id(case: tuple[int, bool]) -> str:
    return f"v{case[0]}" + ("-published0004" if case[1] else "")


# -- the old databases -----------------------------------------------------------------------


@dataclass(frozen=True)
class Seeded:
    """What was put in an old database: job id by state, and the snapshot taken then."""

    ids: dict[str, int]
    snapshot: dict[str, list[tuple[Any, ...]]]


#: Per state: the offset of scheduled_at from now (s), attempt, max_attempts, extra fields.
JOBS: dict[str, dict[str, Any]] = {
    "scheduled": {"due": 3600, "attempt": 0},
    "available": {"due": -10, "attempt": 0},
    "running": {"due": -20, "attempt": 1, "lease": True},
    "retryable": {"due": 3600, "attempt": 2, "errors": [{"attempt": 1, "error": "E: one"},
                                                        {"attempt": 2, "error": "E: two"}]},
    "completed": {"due": -30, "attempt": 1, "finished": True, "result": {"ok": [1, 2]}},
    "cancelled": {"due": -40, "attempt": 0, "finished": True, "cancel": True},
    "discarded": {"due": -50, "attempt": 3, "max": 3, "finished": True,
                  "errors": [{"attempt": 3, "error": "E: three"}]},
}
#: States added by a later schema: no old database can hold them.
NEWER_STATES = {"pending"}  # schema 10
assert set(JOBS) | NEWER_STATES == {s.value for s in JobState}
TASK = "mig_echo"
NODE = "node-old"
JOB_COLUMNS = (
    "id, task, queue, args, kwargs, priority, state, attempt, max_attempts, scheduled_at, "
    "created_at, attempted_at, finished_at, errors, result, tags, meta, lease_owner, "
    "lease_token, lease_expires_at, cancel_requested"
)
#: The rows compared before and after, per table and the schema version that added it.
SNAPSHOTS = {
    "conveyor_jobs": (1, f"SELECT {JOB_COLUMNS} FROM conveyor_jobs ORDER BY id"),
    "conveyor_nodes": (1, "SELECT id, hostname, pid, queues, started_at, heartbeat_at "
                          "FROM conveyor_nodes ORDER BY id"),
    "conveyor_queues": (2, "SELECT name, paused, concurrency, scope, rate_limit, updated_at "
                           "FROM conveyor_queues ORDER BY name"),
    "conveyor_schedules": (2, "SELECT name, task, cron, timezone, args, kwargs, queue, "
                              "priority, misfire, backfill, paused, last_tick, last_job_id, "
                              "created_at FROM conveyor_schedules ORDER BY name"),
    "conveyor_migrations": (1, "SELECT version, name, applied_at FROM conveyor_migrations "
                               "ORDER BY version"),
}


#: From this schema on, finished jobs may sit in history (the archiver moves them): jobs
#: are compared through the view of both tables, conveyor_jobs_all.
(HISTORY,) = [m.version for m in load_migrations("sqlite") if m.name == "job_history"]


class OldDb:
    """A database of one dialect, written to directly (no Conveyor code)."""

    dialect: str
    url: str
    param: str

    def execute(self, statement: str, values: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def apply(self, version: int, name: str, script: str) -> None:
        raise NotImplementedError

    def now(self, offset: int) -> str:
        raise NotImplementedError

    def json(self, value: Any) -> Any:
        raise NotImplementedError

    def fingerprint(self) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def build(self, version: int, published_0004: bool) -> None:
        for migration in load_migrations(self.dialect)[:version]:
            script = migration.sql
            if migration.version == 4 and published_0004:
                script = (PUBLISHED / self.dialect / "0004_cold_state_index.sql").read_text()
            self.apply(migration.version, migration.name, script)

    def seed(self, version: int) -> Seeded:
        p, now, js = self.param, self.now, self.json
        node_values = (NODE, "old-host", 4242, js({"default": 2}))
        self.execute(f"INSERT INTO conveyor_nodes (id, hostname, pid, queues, started_at, "
                     f"heartbeat_at) VALUES ({p}, {p}, {p}, {p}, {now(-60)}, {now(0)})",
                     node_values)
        ids: dict[str, int] = {}
        for n, (state, spec) in enumerate(JOBS.items()):
            lease = spec.get("lease", False)
            finished = now(-5) if spec.get("finished") else "NULL"
            attempted = now(-6) if spec["attempt"] else "NULL"
            row = self.execute(
                "INSERT INTO conveyor_jobs (task, queue, args, kwargs, priority, state, "
                "attempt, max_attempts, scheduled_at, created_at, attempted_at, finished_at, "
                "errors, result, tags, meta, lease_owner, lease_token, lease_expires_at, "
                f"cancel_requested) VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, "
                f"{now(spec['due'])}, {now(-100)}, {attempted}, {finished}, {p}, {p}, {p}, "
                f"{p}, {p}, {p}, {now(3600) if lease else 'NULL'}, {p}) RETURNING id",
                (TASK, "default", js([state, n, {"nested": [n, None, "é"]}]),
                 js({"k": state}), n % 3, state, spec["attempt"], spec.get("max", 20),
                 js(spec.get("errors", [])),
                 js(spec["result"]) if "result" in spec else None,
                 js(["t", state]), js({"from": f"v{version}"}),
                 NODE if lease else None, 7 if lease else None,
                 bool(spec.get("cancel", False))),
            )
            ids[state] = int(row[0][0])
        if version >= 2:
            self.execute(f"INSERT INTO conveyor_queues (name, paused, concurrency, scope, "
                         f"rate_limit) VALUES ({p}, {p}, {p}, {p}, {p})",
                         ("mail", True, 2, "per_node", "10/s"))
            self.execute(f"INSERT INTO conveyor_schedules (name, task, cron, args, queue, "
                         f"paused, last_tick) VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {now(-60)})",
                         ("nightly", TASK, "0 3 * * *", js(["nightly"]), "mail", True))
        return Seeded(ids, self.snapshot(version))

    def snapshot(self, version: int) -> dict[str, list[tuple[Any, ...]]]:
        return {table: self.execute(_all_jobs(query) if version >= HISTORY else query)
                for table, (since, query) in SNAPSHOTS.items() if version >= since}

    def depth(self) -> set[tuple[Any, ...]]:
        return {tuple(r) for r in self.execute(
            "SELECT queue, state, n FROM conveyor_queue_depth")}


def _all_jobs(query: str) -> str:
    return query.replace("FROM conveyor_jobs ", "FROM conveyor_jobs_all ")


class SQLiteDb(OldDb):
    dialect, param = "sqlite", "?"

    def __init__(self, path: Path) -> None:
        self.path, self.url = path, f"sqlite:///{path}"

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, isolation_level=None)

    def execute(self, statement: str, values: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with closing(self._connect()) as conn:
            return conn.execute(statement, values).fetchall()

    def apply(self, version: int, name: str, script: str) -> None:
        # As the SQLite storage does: its bookkeeping table, then the script, then the row.
        with closing(self._connect()) as conn:
            conn.executescript(
                "CREATE TABLE IF NOT EXISTS conveyor_migrations (version INTEGER PRIMARY KEY, "
                "name TEXT NOT NULL, applied_at REAL NOT NULL);\nBEGIN;\n" + script
                + "\n;INSERT INTO conveyor_migrations (version, name, applied_at) VALUES "
                f"({version}, '{name}', (julianday('now') - 2440587.5) * 86400.0);\nCOMMIT;")

    def now(self, offset: int) -> str:
        return f"((julianday('now') - 2440587.5) * 86400.0 + {offset})"

    def json(self, value: Any) -> Any:
        import json

        return json.dumps(value)

    def fingerprint(self) -> list[tuple[Any, ...]]:
        # SQLite keeps each object's CREATE text (normalised, IF NOT EXISTS dropped, with
        # ALTER TABLE's columns added in): equal text, equal schema.
        return self.execute("SELECT type, name, tbl_name, sql FROM sqlite_master "
                            "WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name")


class PostgresDb(OldDb):
    dialect, param = "postgres", "%s"

    def __init__(self, url: str) -> None:
        self.url = url

    def execute(self, statement: str, values: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            cur = conn.execute(statement, values or None)
            return cur.fetchall() if cur.description else []

    def apply(self, version: int, name: str, script: str) -> None:
        # As conveyor's PostgreSQL migrate does: one transaction per run.
        with psycopg.connect(self.url) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS conveyor_migrations (version integer "
                         "PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL "
                         "DEFAULT now())")
            conn.execute(script, prepare=False)
            conn.execute("INSERT INTO conveyor_migrations (version, name) VALUES (%s, %s)",
                         [version, name])

    def now(self, offset: int) -> str:
        return f"(now() + interval '{offset} seconds')"

    def json(self, value: Any) -> Any:
        return Jsonb(value)

    def fingerprint(self) -> list[tuple[Any, ...]]:
        return self.execute("""
            SELECT 'column', table_name::text, column_name::text,
                   concat_ws(' ', ordinal_position, data_type, is_nullable, column_default,
                             is_identity)
            FROM information_schema.columns
            WHERE table_schema = current_schema() AND table_name LIKE 'conveyor%'
            UNION ALL
            SELECT 'index', tablename::text, indexname::text, indexdef FROM pg_indexes
            WHERE schemaname = current_schema() AND tablename LIKE 'conveyor%'
            UNION ALL
            SELECT 'view', viewname::text, '', definition FROM pg_views
            WHERE schemaname = current_schema() AND viewname LIKE 'conveyor%'
            UNION ALL
            SELECT 'constraint', conrelid::regclass::text, conname::text,
                   pg_get_constraintdef(oid) FROM pg_constraint
            WHERE conrelid::regclass::text LIKE 'conveyor%'
            UNION ALL
            SELECT 'options', relname::text, '', coalesce(array_to_string(reloptions, ','), '')
            FROM pg_class WHERE relname LIKE 'conveyor%' AND relkind IN ('r', 'v')
            ORDER BY 1, 2, 3, 4""")


@pytest.fixture(params=[pytest.param("sqlite", marks=pytest.mark.sqlite),
                        pytest.param("postgres", marks=pytest.mark.postgres)])
def new_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[str], OldDb]]:
    """Makes empty databases of the backend (and a fresh one at head, named "fresh").
    On PostgreSQL they are reused across tests (emptied: ``_pg.reusable_database``), as
    creating and dropping two a test cost seconds each under load."""
    admin = ""
    if request.param == "postgres":
        admin = request.getfixturevalue("postgres_admin_url")
    with contextlib.ExitStack() as stack:

        def make(label: str) -> OldDb:
            if request.param == "sqlite":
                return SQLiteDb(tmp_path / f"{label}.db")
            return PostgresDb(stack.enter_context(_pg.reusable_database(admin, "conveyor_mig")))

        yield make


def upgrade(db: OldDb) -> list[str]:
    """The public path to head: ``migrate()`` on PostgreSQL (opening refuses a pending
    schema there), opening the storage on SQLite (it migrates itself on open)."""
    app = Conveyor(db.url)
    try:
        if db.dialect == "postgres":
            return [m.name for m in app.migrate()]
        assert app.get_job(1) is not None  # the first read opens the storage
        return []
    finally:
        app.close()


# -- the upgrade test --------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_upgrade_keeps_every_job_and_reaches_the_head_schema(
    new_db: Callable[[str], OldDb], case: tuple[int, bool]
) -> None:
    version, published_0004 = case
    fresh = new_db("fresh")
    migrate(fresh.url)
    db = new_db("old")
    db.build(version, published_0004)
    assert [r[0] for r in db.execute("SELECT version FROM conveyor_migrations ORDER BY 1")] \
        == list(range(1, version + 1))
    seeded = db.seed(version)

    applied = upgrade(db)
    if db.dialect == "postgres":
        assert applied == [m.name for m in load_migrations("postgres")[version:]]
    after = db.snapshot(HEAD)
    # Nothing lost or changed: every row of every table the old schema had, byte for byte.
    for table, rows in seeded.snapshot.items():
        if table == "conveyor_migrations":
            assert after[table][:version] == rows
            assert [r[0] for r in after[table]] == list(range(1, HEAD + 1))
        else:
            assert after[table] == rows, table
    assert db.fingerprint() == fresh.fingerprint()  # the same schema as a new database
    # The depth view exists and answers.
    assert db.depth() == {("default", s, 1)
                          for s in ("available", "running", "scheduled", "retryable")}

    app = Conveyor(db.url)

    @app.task(name=TASK)
    async def echo(*args: Any, **kwargs: Any) -> int:
        return len(args)

    async def main() -> None:
        for state, job_id in seeded.ids.items():  # as the public API reads them
            job = await app.get_job_async(job_id)
            assert job is not None and job.state == state and job.attempt == JOBS[state]["attempt"]
            assert job.args == [state, list(JOBS).index(state), {"nested":
                                [list(JOBS).index(state), None, "é"]}]
            assert job.kwargs == {"k": state}
        available = await app.get_job_async(seeded.ids["available"])
        assert available is not None
        await run_worker_until(app, in_state(app, available, JobState.COMPLETED),
                               config=WorkerConfig(queues={"default": 2}, stage_interval=0.05,
                                                   shutdown_timeout=5.0))
        done = await app.get_job_async(available.id)
        assert done is not None and done.result == 3 and done.attempt == 1
        await app.close_async()

    try:
        asyncio.run(main())
    finally:
        app.close()
    # The worker changed the job it ran and nothing else.
    jobs_now = db.snapshot(HEAD)["conveyor_jobs"]
    assert [r for r in jobs_now if r[0] != seeded.ids["available"]] == \
        [r for r in seeded.snapshot["conveyor_jobs"] if r[0] != seeded.ids["available"]]

    # A second migrate is a no-op: nothing pending, nothing applied, the schema as it was.
    before = (db.fingerprint(), db.snapshot(HEAD)["conveyor_migrations"])
    again = Conveyor(db.url)
    try:
        assert again.pending_migrations() == []
        assert again.migrate() == []
    finally:
        again.close()
    assert (db.fingerprint(), db.snapshot(HEAD)["conveyor_migrations"]) == before


def test_the_published_0004_fixture_lacks_only_the_view() -> None:
    """The fixture is what d2364a5 published (checked against git below); today's 0004
    is it plus the view, which 0007 creates."""
    for dialect in DIALECTS:
        published = (PUBLISHED / dialect / "0004_cold_state_index.sql").read_text()
        current = load_migrations(dialect)[3].sql
        assert current.startswith(published) and "conveyor_queue_depth" not in published
        assert "conveyor_queue_depth" in load_migrations(dialect)[6].sql


# -- published migrations never change ---------------------------------------------------------


def _git(*args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.fail(f"git {' '.join(args)} failed: {exc}; this test needs the git history",
                    pytrace=False)
    return done.stdout.decode()


def _first_committed(path: str, rev: str = "HEAD") -> tuple[str, bytes] | None:
    """The commit that first added ``path`` and the file's bytes there, following the
    commits that moved it (a rename recorded in that commit itself: ``--follow`` guesses
    across the history and takes a new migration for a copy of an old one); None when it
    was never committed (a migration not yet published)."""
    added = _git("log", "--diff-filter=A", "--format=%H", rev, "--", path).split()
    if not added:
        return None
    commit = added[-1]
    for line in _git("show", "--format=", "-M", "--name-status", commit).splitlines():
        status, *names = line.split("\t")
        if status.startswith("R") and names[1] == path:
            return _first_committed(names[0], f"{commit}^")
    done = subprocess.run(["git", "-C", str(REPO), "show", f"{commit}:{path}"],
                          capture_output=True, check=True)
    return commit[:10], done.stdout


def test_published_migrations_never_change() -> None:
    if _git("rev-parse", "--is-shallow-repository").strip() != "false":
        pytest.fail("a shallow clone hides when migrations were published: "
                    "git fetch --unshallow", pytrace=False)
    checked, changed = 0, []
    for dialect in DIALECTS:
        for file in sorted((REPO / STORAGE / dialect / "migrations").glob("*.sql")):
            rel = file.relative_to(REPO / STORAGE).as_posix()
            first = _first_committed(file.relative_to(REPO).as_posix())
            if first is None:
                continue
            commit, original = first
            checked += 1
            if rel in EDITED_AFTER_PUBLICATION:
                assert file.read_bytes() != original, f"{rel} is back as published: unlist it"
                assert original == (PUBLISHED / dialect / file.name).read_bytes()
            elif file.read_bytes() != original:
                changed.append(f"{rel} (published in {commit})")
    assert checked >= 2 * (HEAD - 1)
    assert not changed, (
        "published migrations were edited: " + ", ".join(changed)
        + ". A database that applied the published text never sees the edit: revert it "
        "and put the change in a new migration."
    )


def test_rows_from_before_0009_read_with_default_policies(
    new_db: Callable[[str], OldDb]
) -> None:
    """Queue settings and nodes written before migration 0009 (queue backoff and
    retention, node labels and version) read as "none set" after it, and take the new
    settings. The version is found by name: another migration may be numbered before it."""
    (policies,) = [m.version for m in load_migrations("sqlite")
                   if m.name == "queue_policies_node_labels"]
    db = new_db("old")
    db.build(policies - 1, False)
    db.seed(policies - 1)
    upgrade(db)
    app = Conveyor(db.url)
    try:
        (mail,) = [q for q in app.list_queues() if q.name == "mail"]
        assert (mail.paused, mail.concurrency, mail.rate_limit) == (True, 2, "10/s")
        assert (mail.backoff, mail.completed_retention, mail.discarded_retention) == (
            None, None, None)
        (node,) = app.list_nodes()
        assert (node.id, node.labels, node.version) == (NODE, {}, None)
        app.set_queue_backoff("mail", "exp:5:60")
        app.set_queue_retention("mail", discarded=120)
        (mail,) = [q for q in app.list_queues() if q.name == "mail"]
        assert (mail.backoff, mail.discarded_retention, mail.paused) == ("exp:5:60", 120.0, True)
    finally:
        app.close()


@pytest.mark.parametrize("version", [4, HISTORY - 1])
def test_upgrade_to_history_reads_every_job_before_and_after_archiving(
    new_db: Callable[[str], OldDb], version: int
) -> None:
    """Migration 0012 leaves finished rows where they are (the archiver moves them in
    batches): every job reads back through get_job and list_jobs before and after the
    move, and only the finished ones move."""
    from conveyor._runtime.archiver import Archiver

    db = new_db("old")
    db.build(version, False)
    seeded = db.seed(version)
    upgrade(db)
    app = Conveyor(db.url)

    async def reads() -> None:
        for state, job_id in seeded.ids.items():
            job = await app.get_job_async(job_id)
            assert job is not None and job.state == state
        listed = await app.list_jobs_async(limit=50)
        assert {j.id: j.state.value for j in listed} == {i: s for s, i in seeded.ids.items()}

    async def main() -> None:
        await reads()
        assert await Archiver(await app.storage(), None, 1.0, after=0.0).run_once() == 3
        await reads()
        await app.close_async()

    try:
        asyncio.run(main())
    finally:
        app.close()
    finished = sorted(seeded.ids[s] for s in ("completed", "cancelled", "discarded"))
    assert [r[0] for r in db.execute("SELECT id FROM conveyor_jobs_history ORDER BY id")] \
        == finished
    assert len(db.execute("SELECT id FROM conveyor_jobs")) == 4
