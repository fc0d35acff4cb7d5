"""The single-enqueue floor on PostgreSQL: Conveyor's own one-job insert
(``job_insert_one``: the same columns, the same NOTIFY wake-up) sent serially, one call
at a time, on one autocommitted connection of the project's driver (psycopg 3 async,
prepared statement, parameters made before the clock starts), and the same on a
blocking psycopg connection for reference. No Conveyor runtime, no Job, no encoding:
what a lone ``await task.enqueue_async(i)`` cannot beat on this machine, so the
distance between it and workload 2 is Conveyor's own part.

Apart from ``bench/floor.py`` (the burn-down, bulk and latency floors) because
``python -m bench.probes`` does not measure this one: its result file is not this
tool's.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import psycopg

from conveyor._storage import load_queries

from ._targets import Target

#: The values every ``job_insert_one`` parameter gets (a parameter not named here, a
#: column added since, is NULL: what a plain job leaves it).
_VALUES: dict[str, Any] = {"task": "noop", "queue": "floor", "kwargs": "{}", "priority": 0,
                           "max_attempts": 20, "tags": "[]", "meta": "{}",
                           "channel": "conveyor_jobs"}
_PARAM = re.compile(r"%\((\w+)\)s")


def _statement(count: int) -> tuple[str, list[dict[str, Any]]]:
    """``job_insert_one`` and the parameters of ``count`` calls (arguments ``[i]``)."""
    sql = load_queries("postgres")["job_insert_one"]
    base = {name: _VALUES.get(name) for name in _PARAM.findall(sql)}
    return sql, [{**base, "args": f"[{i}]"} for i in range(count)]


async def _async_run(url: str, sql: str, params: list[dict[str, Any]], warm: int
                     ) -> tuple[float, float]:
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True, prepare_threshold=0)
    try:
        cur = conn.cursor()
        for p in params[:warm]:
            await cur.execute(sql, p)
            await cur.fetchone()
        began, cpu = time.perf_counter(), time.process_time()
        for p in params[warm:]:
            await cur.execute(sql, p)
            await cur.fetchone()
        return time.perf_counter() - began, time.process_time() - cpu
    finally:
        await conn.close()


def _sync_run(url: str, sql: str, params: list[dict[str, Any]], warm: int
              ) -> tuple[float, float]:
    with psycopg.connect(url, autocommit=True, prepare_threshold=0) as conn:
        cur = conn.cursor()
        for p in params[:warm]:
            cur.execute(sql, p).fetchone()
        began, cpu = time.perf_counter(), time.process_time()
        for p in params[warm:]:
            cur.execute(sql, p).fetchone()
        return time.perf_counter() - began, time.process_time() - cpu


def _stored(target: Target) -> int:
    rows = target.query("SELECT count(*) FROM conveyor_jobs WHERE queue = 'floor'")
    return int(rows[0][0])


def single_insert(target: Target, count: int = 2000, warm: int = 20) -> dict[str, Any]:
    """Serial one-job inserts, ``count`` timed (after ``warm`` untimed ones) on each
    kind of connection: jobs/s, the client's CPU per job (what Conveyor's own part is
    measured against when a loaded machine makes rates noise) and whether every row was
    stored, on an emptied database each time."""
    sql, params = _statement(count + warm)
    out: dict[str, Any] = {"jobs": count, "statement": "job_insert_one"}
    for name in ("async", "sync"):
        target.reset()
        seconds, cpu = (asyncio.run(_async_run(target.url, sql, params, warm))
                        if name == "async" else _sync_run(target.url, sql, params, warm))
        stored = _stored(target)
        out[name] = {"jobs_per_s": round(count / seconds), "seconds": round(seconds, 4),
                     "client_cpu_us_per_job": round(cpu * 1e6 / count, 1),
                     "stored": stored, "exactly_once": stored == count + warm}
    target.reset()
    return out
