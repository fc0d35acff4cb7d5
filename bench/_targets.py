"""The databases a benchmark runs on: a fresh SQLite file, or a PostgreSQL database
that is emptied before every run (only databases named like ``*bench*``/``*test*``)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from conveyor import Conveyor

from . import _env

#: Rows of the backlog (workload 6), in thirds: future, completed, other queues.
BACKLOG_SQL = {
    "sqlite": """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :count)
INSERT INTO conveyor_jobs (task, queue, args, state, attempt, scheduled_at, created_at,
                           attempted_at, finished_at, result)
SELECT 'backlog', CASE WHEN i % 3 = 2 THEN 'bench-other' ELSE 'bench' END, '[0]',
       CASE i % 3 WHEN 0 THEN 'scheduled' WHEN 1 THEN 'completed' ELSE 'available' END,
       CASE WHEN i % 3 = 1 THEN 1 ELSE 0 END,
       now + CASE WHEN i % 3 = 0 THEN 86400.0 * 30 ELSE -3600.0 END, now - 3600.0,
       CASE WHEN i % 3 = 1 THEN now - 3600.0 END, CASE WHEN i % 3 = 1 THEN now - 3600.0 END,
       CASE WHEN i % 3 = 1 THEN 'null' END
FROM n, (SELECT (julianday('now') - 2440587.5) * 86400.0 AS now)""",
    "postgres": """
INSERT INTO conveyor_jobs (task, queue, args, state, attempt, scheduled_at, created_at,
                           attempted_at, finished_at, result)
SELECT 'backlog', CASE WHEN i %% 3 = 2 THEN 'bench-other' ELSE 'bench' END, '[0]',
       CASE i %% 3 WHEN 0 THEN 'scheduled' WHEN 1 THEN 'completed' ELSE 'available' END,
       CASE WHEN i %% 3 = 1 THEN 1 ELSE 0 END,
       now() + CASE WHEN i %% 3 = 0 THEN interval '30 days' ELSE interval '-1 hour' END,
       now() - interval '1 hour',
       CASE WHEN i %% 3 = 1 THEN now() - interval '1 hour' END,
       CASE WHEN i %% 3 = 1 THEN now() - interval '1 hour' END,
       CASE WHEN i %% 3 = 1 THEN 'null'::jsonb END
FROM generate_series(1, %(count)s) AS i""",
}

#: A backlog builds up over hours, not in the second before the run: let the database
#: settle as it would have by then (the WAL checkpointed on SQLite; on PostgreSQL the
#: vacuum that autovacuum would have run: hint bits, visibility map and statistics).
SETTLE_SQL = {
    "sqlite": ("PRAGMA wal_checkpoint(TRUNCATE)", "ANALYZE"),
    "postgres": ("VACUUM ANALYZE conveyor_jobs",),
}

#: Finished jobs move to history (schema 12): outcomes are read through the view of both.
OUTCOMES_SQL = {
    "sqlite": "SELECT state, attempt, count(*) FROM conveyor_jobs_all"
              " WHERE queue = :queue AND task = :task GROUP BY state, attempt",
    "postgres": "SELECT state, attempt, count(*) FROM conveyor_jobs_all"
                " WHERE queue = %(queue)s AND task = %(task)s GROUP BY state, attempt",
}
AVAILABLE_SQL = {
    "sqlite": "SELECT count(*) FROM conveyor_jobs WHERE queue = :queue AND state = 'available'",
    "postgres": "SELECT count(*) FROM conveyor_jobs"
                " WHERE queue = %(queue)s AND state = 'available'",
}


def _migrate(url: str) -> None:
    app = Conveyor(url)
    try:
        app.migrate()
    finally:
        app.close()


def _archive(url: str) -> int:
    """Move every finished row to history through Conveyor's own archiver (its day
    partitions made first on PostgreSQL): where a worker's archiver, passing every
    second, would have put a backlog's finished third long before the run."""
    # imported here: only the backlog needs it, and an older commit being driven by
    # `python -m bench.ab` (the history table predates it) still runs every other case
    from conveyor._runtime.archiver import Archiver

    app = Conveyor(url)

    async def archive() -> int:
        archiver = Archiver(await app.storage(), None, 1.0, after=0.0)
        moved = 0
        while step := await archiver.run_once():
            moved += step
        return moved

    try:
        return asyncio.run(archive())
    finally:
        app.close()


@dataclasses.dataclass
class Target:
    """One database to benchmark. ``reset()`` before each run gives an empty schema."""

    backend: str
    url: str
    workdir: Path
    _conn: sqlite3.Connection | psycopg.Connection[Any] | None = dataclasses.field(
        default=None, repr=False)

    @classmethod
    def sqlite(cls, workdir: Path) -> Target:
        workdir.mkdir(parents=True, exist_ok=True)
        return cls("sqlite", f"sqlite:///{(workdir / 'bench.db').resolve()}", workdir)

    @classmethod
    def postgres(cls, url: str, workdir: Path) -> Target:
        name = str(conninfo_to_dict(url).get("dbname", ""))
        if "bench" not in name and "test" not in name:
            raise SystemExit(f"refusing to empty database {name!r}: the suite only runs on a "
                             "database whose name contains 'bench' or 'test'")
        target = cls("postgres", url, workdir)
        target._create_database(name)
        return target

    @property
    def path(self) -> str:
        return self.url[len("sqlite:///"):]

    def _create_database(self, name: str) -> None:
        admin = make_conninfo(self.url, dbname="postgres")
        with psycopg.connect(admin, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
            if not exists:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

    def reset(self) -> None:
        """An empty, migrated database: a new SQLite file, or truncated Postgres tables."""
        self.close()
        if self.backend == "sqlite":
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(self.path + suffix)
            _migrate(self.url)
            return
        _migrate(self.url)
        with psycopg.connect(self.url, autocommit=True) as conn:
            tables = [r[0] for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
                " AND tablename LIKE 'conveyor%%' AND tablename <> 'conveyor_migrations'")]
            conn.execute(sql.SQL("TRUNCATE {} RESTART IDENTITY").format(
                sql.SQL(", ").join(sql.Identifier(t) for t in tables)))
            conn.execute("VACUUM ANALYZE conveyor_jobs")

    def settings(self) -> dict[str, Any]:
        if self.backend == "sqlite":
            return _env.sqlite_settings(self.path)
        return _env.postgres_settings(self.url)

    def query(self, statement: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """Run one statement (``:name`` style on SQLite, ``%(name)s`` on Postgres) on a
        connection kept open until ``close()`` or ``reset()``."""
        if self._conn is None:
            self._conn = (sqlite3.connect(self.path, timeout=60, isolation_level=None)
                          if self.backend == "sqlite"
                          else psycopg.connect(self.url, autocommit=True))
        if isinstance(self._conn, sqlite3.Connection):
            return self._conn.execute(statement, params or {}).fetchall()
        cur = self._conn.execute(statement, params or {})
        return cur.fetchall() if cur.description else []

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def add_backlog(self, count: int) -> None:
        """Workload 6: ``count`` rows that a worker of queue 'bench' must never claim;
        the completed third in history, as the archiver keeps it (left in the hot table,
        the worker's archiver moved those rows during the measured drain: on SQLite, the
        one writer, that alone was a 30-36% slowdown, ``bench/analysis.md``)."""
        self.query(BACKLOG_SQL[self.backend], {"count": count})
        self.close()  # the archiver writes on its own connection
        _archive(self.url)
        for statement in SETTLE_SQL[self.backend]:
            self.query(statement)

    def outcomes(self, queue: str, task: str) -> dict[str, int]:
        """``{"completed/1": n, ...}``: jobs of ``task`` in ``queue`` per state and attempt."""
        statement = OUTCOMES_SQL[self.backend]
        if not self._has_history():  # before schema 12 (`python -m bench.ab` on old commits)
            statement = statement.replace("conveyor_jobs_all", "conveyor_jobs")
        rows = self.query(statement, {"queue": queue, "task": task})
        return {f"{state}/{attempt}": int(n) for state, attempt, n in sorted(rows)}

    def _has_history(self) -> bool:
        if self.backend == "sqlite":
            return bool(self.query("SELECT count(*) FROM sqlite_master"
                                   " WHERE name = 'conveyor_jobs_all'")[0][0])
        return bool(self.query("SELECT to_regclass('conveyor_jobs_all') IS NOT NULL")[0][0])

    def available(self, queue: str) -> int:
        return int(self.query(AVAILABLE_SQL[self.backend], {"queue": queue})[0][0])

    def table_stats(self) -> dict[str, Any]:
        """Size of the jobs table; dead tuples on Postgres, free pages on SQLite."""
        if self.backend == "sqlite":
            pages, free, size = (self.query(f"PRAGMA {p}")[0][0]
                                 for p in ("page_count", "freelist_count", "page_size"))
            wal = Path(self.path + "-wal")
            return {"db_bytes": pages * size, "free_pages": free,
                    "wal_bytes": wal.stat().st_size if wal.exists() else 0}
        row = self.query(
            "SELECT n_live_tup, n_dead_tup, pg_relation_size('conveyor_jobs'),"
            " pg_total_relation_size('conveyor_jobs'), autovacuum_count, vacuum_count"
            " FROM pg_stat_user_tables WHERE relname = 'conveyor_jobs'")[0]
        keys = ("live_tuples", "dead_tuples", "heap_bytes", "total_bytes", "autovacuums",
                "vacuums")
        return dict(zip(keys, row, strict=True))
