"""PostgreSQL hot paths: narrower statements and cheaper row decoding.

* Plain inserts (no unique key in the batch) return only what the database decided
  (id, state, due and creation time); the Jobs are built from what was sent.
* Claims read tuple rows and decode them with ``_fast`` (no dict per row).
* Completed acks without an error (nearly all of them) use ``job_ack_completed``:
  three arrays instead of seven, and no NOTIFY to consider.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg.rows import tuple_row
from psycopg_pool import ConnectionPool

from .._job import Job
from ._fast import jobs_from_inserts, jobs_from_rows, plain_completed
from ._protocol import JobAck, JobInsert

Fetch = Callable[[str, Mapping[str, Any]], Awaitable[list[Any]]]


async def insert_plain(fetch: Fetch, values: Mapping[str, Any],
                       jobs: Sequence[JobInsert]) -> list[Job]:
    rows = await fetch("job_insert_plain", values)
    return jobs_from_inserts(jobs, [r["id"] for r in rows], [r["state"] for r in rows],
                             [r["scheduled_at"] for r in rows], [r["created_at"] for r in rows])


async def claim(conn: psycopg.AsyncConnection[Any], sql: str,
                values: Mapping[str, Any]) -> list[Job]:
    cur = conn.cursor(row_factory=tuple_row)
    await cur.execute(sql, values)
    rows = await cur.fetchall()
    if not rows or cur.description is None:
        return []
    return jobs_from_rows([c.name for c in cur.description], rows, json_text=False)


async def ack_many(fetch: Fetch, batch: Sequence[JobAck],
                   general: Callable[[Sequence[JobAck]], Awaitable[set[int]]]) -> set[int]:
    """Apply ``batch`` (one ack per id and token); returns the ids that applied."""
    fast = [a for a in batch if plain_completed(a)]
    rest = [a for a in batch if not plain_completed(a)] if len(fast) < len(batch) else []
    applied: set[int] = set()
    if fast:
        rows = await fetch("job_ack_completed", {
            "id": [a.id for a in fast], "lease_token": [a.lease_token for a in fast],
            "result": [a.result_json for a in fast]})
        applied.update(r["id"] for r in rows)
    if rest:
        applied |= await general(rest)
    return applied


def insert_plain_sync(conn: psycopg.Connection[Any], sql: str, values: Mapping[str, Any],
                      jobs: Sequence[JobInsert]) -> list[Job]:
    rows = conn.execute(sql, values).fetchall()
    return jobs_from_inserts(jobs, [r[0] for r in rows], [r[1] for r in rows],
                             [r[2] for r in rows], [r[3] for r in rows])


class BlockingPool:
    """Synchronous connections for the sync API's enqueue, opened on first use: a sync
    caller then talks to PostgreSQL from its own thread, not through the portal's loop
    (two thread hops fewer per call, and callers on many threads run in parallel)."""

    def __init__(self, url: str, kwargs: Mapping[str, Any], max_size: int) -> None:
        self._url, self._kwargs, self._max_size = url, dict(kwargs), max_size
        self._pool: ConnectionPool[psycopg.Connection[Any]] | None = None
        self._lock = threading.Lock()

    def get(self, timeout: float) -> ConnectionPool[psycopg.Connection[Any]]:
        with self._lock:
            if self._pool is None:
                pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
                    self._url, kwargs=self._kwargs, min_size=1, max_size=self._max_size,
                    open=False, name="conveyor-sync")
                pool.open(wait=True, timeout=timeout)
                self._pool = pool
            return self._pool

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
