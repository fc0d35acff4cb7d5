"""Schema versions on PostgreSQL: applying migrations under a cluster-wide lock, and the
health probe. Postgres never migrates on open: changing a shared schema is an
operator's decision, made with ``conveyor migrate``; opening only checks."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from ..schema import DbHealth, Migration, pending_migrations
from .connection import Errors, PostgresConfig, connect_kwargs

#: Serialises concurrent ``conveyor migrate`` runs across every process ("conv").
_MIGRATE_LOCK = 0x636F6E76


async def applied(conn: psycopg.AsyncConnection[Any]) -> list[int]:
    """The versions applied so far; none when the bookkeeping table is missing."""
    cur = await conn.execute("SELECT to_regclass('conveyor_migrations') IS NULL AS missing")
    row = await cur.fetchone()
    if row is None or row["missing"]:
        return []
    cur = await conn.execute("SELECT version FROM conveyor_migrations")
    return [r["version"] for r in await cur.fetchall()]


async def migrate(conn: psycopg.AsyncConnection[Any], dry_run: bool) -> list[Migration]:
    """Apply what is pending; ``conn`` must be inside a transaction."""
    await conn.execute("SELECT pg_advisory_xact_lock(%s)", [_MIGRATE_LOCK])
    await conn.execute(
        "CREATE TABLE IF NOT EXISTS conveyor_migrations (version integer PRIMARY KEY, "
        "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
    )
    cur = await conn.execute("SELECT version FROM conveyor_migrations")
    pending = pending_migrations("postgres", [r["version"] for r in await cur.fetchall()])
    if dry_run:
        return pending
    for migration in pending:
        # No parameters, so psycopg sends the whole multi-statement file at once.
        await conn.execute(migration.sql, prepare=False)
        await conn.execute(
            "INSERT INTO conveyor_migrations (version, name) VALUES (%s, %s)",
            [migration.version, migration.name],
        )
    return pending


async def health(config: PostgresConfig, errors: Errors, sql: str,
                 timeout: float) -> DbHealth:
    """On its own connection: it answers quickly (and truthfully) while the pool would
    wait."""
    latest = len(pending_migrations("postgres", ()))
    try:
        async with asyncio.timeout(timeout):
            conn = await psycopg.AsyncConnection.connect(config.url, **connect_kwargs(config))
            async with conn:
                cur = await conn.execute(sql, prepare=False)
                row = await cur.fetchone()
    except psycopg.errors.UndefinedTable:
        return DbHealth(True, 0, latest)
    except (psycopg.Error, TimeoutError, OSError) as exc:
        return DbHealth(False, None, latest, str(errors.unavailable(exc)))
    return DbHealth(True, int(row[0]) if row is not None else 0, latest)
