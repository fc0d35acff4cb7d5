"""The SQLite backend's file: the storage thread and the sync API's own connections to
it (``connection.py``), how a named statement runs there (what ``BaseStorage`` asks
for), opening, closing and the schema that migrates itself. ``SQLiteStorage``
(``storage.py``) adds the statements' paths on top, as ``PostgresStorage`` does over
``PostgresPools``.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar
from urllib.parse import quote

from ..._errors import DatabaseUnavailableError
from ..._job import JobState
from ..base import Row, changed_jobs
from ..fair_storage import FairStorage
from ..freelist import FreeList
from ..job_types import JobBulkParams, JobChanged, JobFilter
from ..schema import DbHealth, Migration, pending_migrations
from ..wake import WakeHub
from .connection import SQLiteConfig, StorageThread, connect, split_script

Conn = sqlite3.Connection
#: Sync enqueues writing at once from different threads (more wait for a free one).
_CALLER_CONNECTIONS = 32


class SQLiteFile(FairStorage):
    """One SQLite file in WAL mode as a storage: its thread and callers' connections, the
    statements' runner, its lifecycle and schema: what ``SQLiteStorage`` runs on."""

    dialect: ClassVar[str] = "sqlite"
    json_text: ClassVar[bool] = True
    wake_locally: ClassVar[bool] = True
    unique_violation: ClassVar[type[Exception]] = sqlite3.IntegrityError

    def __init__(self, config: SQLiteConfig, hub: WakeHub) -> None:
        super().__init__(hub, poll_interval=max(config.poll_interval * 40, 0.2))
        self._config = config
        self._thread = StorageThread(config, hub)
        #: The sync API's own connections, writing under the thread's write lock.
        self._callers: FreeList[Conn] = FreeList(
            lambda: connect(config), lambda conn: not conn.in_transaction, _CALLER_CONNECTIONS,
            lambda: DatabaseUnavailableError("no free SQLite connection for the sync enqueue"))

    # -- what BaseStorage asks for -------------------------------------------------------

    async def _read(self, name: str, values: Mapping[str, Any]) -> list[Row]:
        sql = self._q[name]
        return await self._thread.call(lambda c: c.execute(sql, values).fetchall())

    async def _write(self, name: str, values: Mapping[str, Any]) -> list[Row]:
        sql = self._q[name]
        return await self._thread.call_write(lambda c: c.execute(sql, values).fetchall())

    def _time(self, value: datetime) -> Any:
        return value.timestamp()

    def _filter_values(self, f: JobFilter) -> dict[str, Any]:
        """Lists become ',a,b,' (states) and JSON text (ids)."""
        return {
            "states": "," + ",".join(s.value for s in f.states) + "," if f.states else None,
            "queue": f.queue, "task": f.task, "tag": f.tag, "text": f.text or None,
            "error_key": f.error_key, "ids": json.dumps(list(f.ids)) if f.ids else None,
            "min_id": f.min_id, "max_id": f.max_id, "args_paths": _args_paths(f.args_contains),
        }

    async def _change_matching(self, params: JobBulkParams, allowed: Sequence[JobState],
                               update: str, extra: Mapping[str, Any]) -> list[JobChanged]:
        values = {**self._filter_values(params.filter), "limit": params.limit,
                  "allowed": "," + ",".join(s.value for s in allowed) + ","}

        def run(c: Conn) -> list[JobChanged]:
            picked = c.execute(self._q["job_pick_matching"], values).fetchall()
            if not picked:
                return []
            ids = json.dumps([r["id"] for r in picked])
            done = {r["id"] for r in c.execute(self._q[update], {"ids": ids, **extra})}
            return changed_jobs(picked, done)

        return await self._thread.call_write(run)

    async def _move(self, pick: str, then: Sequence[str],
                    values: Mapping[str, Any]) -> tuple[list[Row], list[Row]]:
        def run(c: Conn) -> tuple[list[Row], list[Row]]:
            picked = c.execute(self._q[pick], values).fetchall()
            rows: list[Row] = []
            if picked:
                ids = {"ids": json.dumps([r["id"] for r in picked])}
                for name in then:
                    rows = c.execute(self._q[name], {**values, **ids}).fetchall()
            return picked, rows

        return await self._thread.call_write(run)

    # -- lifecycle and schema ----------------------------------------------------------------

    async def open(self, *, check_schema: bool = True) -> None:
        """The embedded database migrates itself: there is no operator to ask."""
        if self._thread.running:
            return
        await self._thread.start()
        if check_schema:
            await self.migrate()

    async def close(self) -> None:
        self._callers.close()
        await self._thread.stop()

    def _pending(self, conn: Conn) -> list[Migration]:
        """Read-only, so that a dry run writes nothing."""
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'conveyor_migrations'"
        ).fetchone()
        applied = [r[0] for r in conn.execute("SELECT version FROM conveyor_migrations")
                   ] if exists else []
        return pending_migrations(self.dialect, applied)

    async def schema_pending(self) -> list[Migration]:
        return await self._thread.call_write(self._pending)

    async def migrate(self, *, dry_run: bool = False) -> list[Migration]:
        def run(conn: Conn) -> list[Migration]:
            pending = self._pending(conn)
            if dry_run:
                return pending
            conn.execute(
                "CREATE TABLE IF NOT EXISTS conveyor_migrations ("
                "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
            )
            for migration in pending:
                for statement in split_script(migration.sql):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO conveyor_migrations (version, name, applied_at) "
                    "VALUES (?, ?, (julianday('now') - 2440587.5) * 86400.0)",
                    (migration.version, migration.name),
                )
            return pending

        return await self._thread.call_write(run)

    async def db_health(self, *, timeout: float = 3.0) -> DbHealth:
        """On its own read-only connection: a database file that went away shows, where
        the storage's open connection would still read the unlinked file."""
        latest = len(pending_migrations(self.dialect, ()))
        sql = self._q["schema_version"]

        def probe() -> int:
            uri = f"file:{quote(self._config.path, safe='/')}?mode=ro"
            conn = sqlite3.connect(uri, uri=True, timeout=timeout)
            try:
                return int(conn.execute(sql).fetchone()[0])
            finally:
                conn.close()

        try:
            version = await asyncio.wait_for(asyncio.to_thread(probe), timeout)
        except (sqlite3.Error, TimeoutError) as exc:
            return DbHealth(False, None, latest, f"{type(exc).__name__}: {exc}")
        return DbHealth(True, version, latest)


def _args_paths(args_contains: str | None) -> str | None:
    """``{"order": {"id": 7}}`` as ``[["$.\"order\".\"id\"", 7, "real"]]``: each
    value with its JSON path and its type as search.sql compares it (SQLite's json_type
    with integer/real and true/false merged)."""
    if args_contains is None:
        return None
    found: list[list[Any]] = []

    def walk(value: dict[str, Any], path: str) -> None:
        for key, item in value.items():
            where = f'{path}."{key}"'
            if isinstance(item, dict):
                walk(item, where)
            else:
                kind = ("null" if item is None else "false" if isinstance(item, bool)
                        else "text" if isinstance(item, str) else "real")
                found.append([where, item, kind])

    walk(json.loads(args_contains), "$")
    return json.dumps(found)
