"""PostgreSQL batch paths: narrower statements and cheaper row decoding.

* Plain inserts (no unique key in the batch) go through COPY when large
  (``copy_insert.py``), else one INSERT that returns only what the database decided
  (id, state, due and creation time); the Jobs are built from what was sent, or not
  at all when the caller wants only the ids.
* Claims read tuple rows of only the columns a worker needs, JSON as text, made Jobs
  by ``rows.claimed_from_datetimes`` (no dict per row, arguments decoded on first use).
* Completed acks without an error (nearly all of them) use ``job_ack_completed``:
  three arrays instead of seven, and no NOTIFY to consider; or ``job_ack_retire``,
  which moves them to history in the same statement (``JobAckManyParams.retire``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from ..._job import Job
from ..inserted import jobs_from_inserts
from ..job_types import JobAck, JobInsert
from ..rows import claimed_from_datetimes, plain_completed, utc
from .connection import tuple_cursor, tuple_cursor_sync
from .copy_insert import COPY_MIN_BATCH, Inserted, copy_async, copy_sync

Fetch = Callable[[str, Mapping[str, Any]], Awaitable[list[Any]]]


#: (query parameter, attribute) pairs of ``job_insert``, sent as one array per column.
_INSERT_COLUMNS = (
    ("task", "task"), ("queue", "queue"), ("args", "args_json"), ("kwargs", "kwargs_json"),
    ("priority", "priority"), ("max_attempts", "max_attempts"), ("tags", "tags_json"),
    ("meta", "meta_json"), ("unique_key", "unique_key"), ("unique_states", "unique_states"),
    ("concurrency_key", "concurrency_key"), ("requires", "requires_json"),
)


def insert_values(jobs: Sequence[JobInsert], channel: str) -> dict[str, Any]:
    """Column-wise arrays: the query unnests them, so a batch is one statement."""
    values: dict[str, Any] = {col: [getattr(j, a) for j in jobs] for col, a in _INSERT_COLUMNS}
    # psycopg refuses to dump a list mixing int and float (delay=60 next to 0.5)
    values["delay"] = [None if j.delay is None else float(j.delay) for j in jobs]
    # A naive run_at means local time, as datetime.timestamp() reads it on SQLite.
    values["run_at"] = [j.run_at.astimezone(UTC) if j.run_at else None for j in jobs]
    values["expires_in"] = [None if j.expires_in is None else float(j.expires_in) for j in jobs]
    values["expires_at"] = [j.expires_at.astimezone(UTC) if j.expires_at else None for j in jobs]
    values["channel"] = channel
    return values


async def insert_plain(conn: psycopg.AsyncConnection[Any], queries: Mapping[str, str],
                       jobs: Sequence[JobInsert], channel: str,
                       prepare: bool | None = None, jobs_too: bool = False) -> Inserted:
    """Insert a batch without unique keys (on a pooled or the caller's connection):
    COPY for a large batch, one INSERT otherwise. ``prepare``: psycopg's, ``False`` on
    a caller's connection (``CALLER_PREPARE``). ``jobs_too``: the Jobs are wanted
    (``jobs_of``); COPY builds them while the server inserts."""
    if len(jobs) >= COPY_MIN_BATCH:
        return await copy_async(conn, queries, jobs, channel, prepare, jobs_too)
    sql, params = _statement(queries, jobs, channel)
    cur = tuple_cursor(conn)
    await cur.execute(sql, params, prepare=prepare)
    return _inserted(await cur.fetchall())


def insert_plain_sync(conn: psycopg.Connection[Any], queries: Mapping[str, str],
                      jobs: Sequence[JobInsert], channel: str,
                      prepare: bool | None = None, jobs_too: bool = False) -> Inserted:
    """``insert_plain`` on a synchronous connection."""
    if len(jobs) >= COPY_MIN_BATCH:
        return copy_sync(conn, queries, jobs, channel, prepare, jobs_too)
    sql, params = _statement(queries, jobs, channel)
    cur = tuple_cursor_sync(conn)
    return _inserted(cur.execute(sql, params, prepare=prepare).fetchall())


def _statement(queries: Mapping[str, str], jobs: Sequence[JobInsert], channel: str
               ) -> tuple[str, Mapping[str, Any]]:
    """One job: scalar parameters (arrays cost the client more to send than the
    statement costs the server); several alike but for their arguments (the calls of
    one task that an enqueue_async pipeline batch holds): two arrays and scalars;
    otherwise the column arrays of ``job_insert_plain``."""
    if len(jobs) == 1:
        return queries["job_insert_one"], one_values(jobs[0], channel)
    if _alike(jobs):
        values = one_values(jobs[0], channel)
        values.update(args=[j.args_json for j in jobs], kwargs=[j.kwargs_json for j in jobs])
        return queries["job_insert_alike"], values
    return queries["job_insert_plain"], insert_values(jobs, channel)


def _alike(jobs: Sequence[JobInsert]) -> bool:
    """Every job the first one but for its arguments (the unique fields are None on a
    plain batch)."""
    first = jobs[0]
    shared = (first.task, first.queue, first.priority, first.max_attempts, first.tags_json,
              first.meta_json, first.concurrency_key, first.delay, first.run_at)
    return all((j.task, j.queue, j.priority, j.max_attempts, j.tags_json, j.meta_json,
                j.concurrency_key, j.delay, j.run_at) == shared for j in jobs)


def _inserted(rows: Sequence[tuple[Any, ...]]) -> Inserted:
    """Rows of (id, state, scheduled_at, created_at), in request order."""
    return Inserted([r[0] for r in rows], [r[1] for r in rows], [utc(r[2]) for r in rows],
                    utc(rows[0][3]))


def jobs_of(jobs: Sequence[JobInsert], inserted: Inserted) -> list[Job]:
    """The Jobs a plain batch wrote, built from what was sent (or as COPY built them)."""
    if inserted.jobs is not None:
        return inserted.jobs
    return jobs_from_inserts(jobs, inserted.ids, inserted.states, inserted.scheduled,
                             [inserted.now] * len(jobs))


async def claim(conn: psycopg.AsyncConnection[Any], sql: str,
                values: Mapping[str, Any]) -> list[Job]:
    """Run the claim (``rows.CLAIM_COLUMNS``, JSON as text); its Jobs, arguments and
    the other JSON columns decoded on first access."""
    return claimed_from_datetimes(await claim_rows(conn, sql, values), values["owner"])


async def claim_rows(conn: psycopg.AsyncConnection[Any], sql: str,
                     values: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """A claim's tuple rows (``rows.CLAIM_COLUMNS`` in order)."""
    cur = conn.cursor(row_factory=tuple_row)
    await cur.execute(sql, values)
    return await cur.fetchall()


async def ack_many(fetch: Fetch, batch: Sequence[JobAck], node: str | None,
                   general: Callable[[Sequence[JobAck]], Awaitable[set[int]]],
                   retire: bool = False) -> set[int]:
    """Apply ``batch`` (one ack per id and token); returns the ids that applied.
    ``retire``: plain completions the archiving rule lets go move to history at once
    (``job_ack_retire``)."""
    fast = [a for a in batch if plain_completed(a)]
    rest = [a for a in batch if not plain_completed(a)] if len(fast) < len(batch) else []
    applied: set[int] = set()
    if fast:
        rows = await fetch("job_ack_retire" if retire else "job_ack_completed", {
            "id": [a.id for a in fast], "lease_token": [a.lease_token for a in fast],
            "result": [a.result_json for a in fast],
            "run_time": [None if a.run_time is None else float(a.run_time) for a in fast],
            "node": node})
        applied.update(r["id"] for r in rows)
    if rest:
        applied |= await general(rest)
    return applied


def one_values(job: JobInsert, channel: str) -> dict[str, Any]:
    """Scalar parameters of ``job_insert_one``."""
    return {"task": job.task, "queue": job.queue, "args": job.args_json,
            "kwargs": job.kwargs_json, "priority": job.priority,
            "max_attempts": job.max_attempts, "tags": job.tags_json, "meta": job.meta_json,
            "delay": None if job.delay is None else float(job.delay),
            "run_at": job.run_at.astimezone(UTC) if job.run_at else None,
            "concurrency_key": job.concurrency_key, "channel": channel}
