"""PostgreSQL batch paths: narrower statements and cheaper row decoding.

* Plain inserts (no unique key in the batch) return only what the database decided
  (id, state, due and creation time); the Jobs are built from what was sent.
* Claims read tuple rows and decode them with ``rows.jobs_from_rows`` (no dict per row).
* Completed acks without an error (nearly all of them) use ``job_ack_completed``:
  three arrays instead of seven, and no NOTIFY to consider.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from ..._job import Job
from ..job_types import JobAck, JobInsert
from ..rows import jobs_from_inserts, jobs_from_rows, plain_completed

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


async def ack_many(fetch: Fetch, batch: Sequence[JobAck], node: str | None,
                   general: Callable[[Sequence[JobAck]], Awaitable[set[int]]]) -> set[int]:
    """Apply ``batch`` (one ack per id and token); returns the ids that applied."""
    fast = [a for a in batch if plain_completed(a)]
    rest = [a for a in batch if not plain_completed(a)] if len(fast) < len(batch) else []
    applied: set[int] = set()
    if fast:
        rows = await fetch("job_ack_completed", {
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


def insert_plain_sync(conn: psycopg.Connection[Any], sql: str, values: Mapping[str, Any],
                      jobs: Sequence[JobInsert]) -> list[Job]:
    rows = conn.execute(sql, values).fetchall()
    return jobs_from_inserts(jobs, [r[0] for r in rows], [r[1] for r in rows],
                             [r[2] for r in rows], [r[3] for r in rows])
