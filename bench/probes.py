"""``python -m bench.probes``: what the databases themselves cost on this machine, with
no Conveyor Python in the way: the floors the targets are measured against.

SQLite: CPU microseconds per row of the insert, claim and ack statements, with
Conveyor's schema and with each index that is not needed by the claim dropped in turn,
and one row inserted and committed on its own (the floor of a single enqueue).
PostgreSQL: ``EXPLAIN (ANALYZE, WAL)`` of a claim of 100, an ack of 100 and an insert
of 1,000 (execution time and WAL records per row), a ``SELECT 1`` round trip, a
one-row insert committed on its own (the floor of a single enqueue), and the burn-down
floor: Conveyor's claim and ack statements in a raw psycopg loop (``bench/floor.py``),
with the bulk-enqueue floor (its COPY statements, rows encoded by the server) and the
latency floor (insert, NOTIFY, claim on three plain connections) beside it.
Writes ``bench/results/probes.json``.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg

from conveyor._storage import load_queries

from . import _env, floor
from .__main__ import DEFAULT_OUT, postgres_url
from ._targets import Target

_INSERT = ("INSERT INTO conveyor_jobs (task, queue, args, kwargs, priority, max_attempts, tags,"
           " meta, state, scheduled_at, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)")
_CLAIM = {"queue": "default", "limit": 100, "owner": "probe", "lease_ttl": 30.0}
OPTIONAL_INDEXES = ("conveyor_jobs_state_idx", "conveyor_jobs_task_idx",
                    "conveyor_jobs_finished_idx")


def _cpu_per_row(fn: Callable[[], int]) -> float:
    began = time.process_time()
    rows = fn()
    return round((time.process_time() - began) * 1e6 / rows, 2)


@contextlib.contextmanager
def _sqlite_db() -> Iterator[tuple[Target, sqlite3.Connection]]:
    """A fresh migrated SQLite file in a temporary directory and one autocommit
    connection on it, in WAL mode with ``synchronous=NORMAL`` (as Conveyor opens it)."""
    with tempfile.TemporaryDirectory() as tmp:
        target = Target.sqlite(Path(tmp))
        target.reset()
        conn = sqlite3.connect(target.path, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            yield target, conn
        finally:
            conn.close()
            target.close()


def _sqlite_once(drop: str | None, rows: int, backlog: int = 0,
                 in_place: bool = False) -> dict[str, float]:
    """CPU per row of the insert, the narrow claim and the ack. The ack is the one a
    worker writes at the default ``archive_after`` of 0 (``job_ack_retire``: the copy to
    history, then the delete of the batch), as the burn-downs held against this floor
    run; ``in_place``: ``job_ack_completed``, which leaves the row hot for the archiver."""
    q = load_queries("sqlite")
    with _sqlite_db() as (target, conn):
        if drop:
            conn.execute(f"DROP INDEX {drop}")
        if backlog:
            target.add_backlog(backlog)
        now = time.time()
        data = [("noop", "default", f"[{i}]", "{}", 0, 20, "[]", "{}", "available", now, now)
                for i in range(rows)]
        claimed: list[tuple[int, int]] = []

        def insert() -> int:
            for i in range(0, rows, 1000):
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(_INSERT, data[i:i + 1000])
                conn.execute("COMMIT")
            return rows

        def claim() -> int:
            shipped = q["job_fetch_available"]
            sql = shipped[:shipped.rindex("RETURNING ")] + "RETURNING id, lease_token"
            while len(claimed) < rows:
                conn.execute("BEGIN IMMEDIATE")
                claimed.extend(conn.execute(sql, _CLAIM).fetchall())
                conn.execute("COMMIT")
            return rows

        def ack() -> int:
            for i in range(0, rows, 100):
                acks = json.dumps([(job, token, "null", 0.0)
                                   for job, token in claimed[i:i + 100]])
                conn.execute("BEGIN IMMEDIATE")
                if in_place:
                    conn.execute(q["job_ack_completed"], {"node": "probe", "acks": acks})
                elif conn.execute(q["job_ack_retire"], {"node": "probe", "acks": acks}
                                  ).rowcount == len(claimed[i:i + 100]):
                    conn.execute(q["job_ack_retire_delete_all"], {"acks": acks})
                else:
                    raise RuntimeError("the floor's ack did not move its whole batch")
                conn.execute("COMMIT")
            return rows

        return {"insert_us": _cpu_per_row(insert), "claim_us": _cpu_per_row(claim),
                "ack_us": _cpu_per_row(ack)}


def sqlite_single_insert(rows: int, repeat: int = 3) -> dict[str, float]:
    """The floor of a single enqueue on SQLite: one row inserted and committed on its own
    (``BEGIN IMMEDIATE``, the insert, ``COMMIT``: as ``task.enqueue()`` writes), by the
    sqlite3 module alone on a WAL file with ``synchronous=NORMAL``; the best of
    ``repeat`` runs of wall time and CPU per row."""
    runs = []
    for _ in range(repeat):
        with _sqlite_db() as (_, conn):
            now = time.time()
            row = ("noop", "default", "[1]", "{}", 0, 20, "[]", "{}", "available", now, now)
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(rows):
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(_INSERT, row)
                conn.execute("COMMIT")
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        runs.append((wall, cpu))
    wall, cpu = min(runs)
    return {"rows": rows, "per_s": round(rows / wall), "wall_us": round(wall * 1e6 / rows, 2),
            "cpu_us": round(cpu * 1e6 / rows, 2)}


def sqlite_probe(rows: int, repeat: int) -> dict[str, Any]:
    """Median of ``repeat`` runs per schema variant."""
    out: dict[str, Any] = {}
    for drop in (None, *OPTIONAL_INDEXES):
        runs = [_sqlite_once(drop, rows) for _ in range(repeat)]
        out[f"without {drop}" if drop else "schema as shipped"] = {
            key: statistics.median(r[key] for r in runs) for key in runs[0]}
    runs = [_sqlite_once(None, rows, in_place=True) for _ in range(repeat)]
    out["schema as shipped, ack in place"] = {
        key: statistics.median(r[key] for r in runs) for key in runs[0]}
    return out


def _explain(conn: psycopg.Connection[Any], sql: str, params: dict[str, Any],
             rows: int) -> dict[str, float]:
    """Execution time and WAL of one statement, rolled back."""
    with conn.transaction(force_rollback=True):
        plan = conn.execute("EXPLAIN (ANALYZE, WAL, FORMAT JSON) " + sql, params).fetchone()
    assert plan is not None
    top = plan[0][0]
    return {"execution_ms": round(top["Execution Time"], 3),
            "us_per_row": round(top["Execution Time"] * 1e3 / rows, 2),
            "wal_records_per_row": round(top["Plan"].get("WAL Records", 0) / rows, 2),
            "wal_bytes_per_row": round(top["Plan"].get("WAL Bytes", 0) / rows, 1)}


def _round_trips(conn: psycopg.Connection[Any], sql: str, n: int) -> float:
    began = time.perf_counter()
    for _ in range(n):
        conn.execute(sql).fetchall()
    return round((time.perf_counter() - began) * 1e3 / n, 3)


def postgres_probe(url: str) -> dict[str, Any]:
    q = load_queries("postgres")
    target = Target.postgres(url, Path(tempfile.gettempdir()))
    target.reset()
    with psycopg.connect(url, autocommit=True, prepare_threshold=1) as conn:
        conn.execute("INSERT INTO conveyor_jobs (task, queue, args, state, scheduled_at,"
                     " created_at) SELECT 'noop', 'default', '[1]', 'available', now(), now()"
                     " FROM generate_series(1, 20000)")
        conn.execute("VACUUM ANALYZE conveyor_jobs")
        n = 1000
        insert = {"task": ["noop"] * n, "queue": ["default"] * n, "args": ["[1]"] * n,
                  "kwargs": ["{}"] * n, "priority": [0] * n, "max_attempts": [20] * n,
                  "tags": ["[]"] * n, "meta": ["{}"] * n, "delay": [None] * n,
                  "run_at": [None] * n, "concurrency_key": [None] * n, "channel": "probe"}
        out: dict[str, Any] = {
            "insert_1000": _explain(conn, q["job_insert_plain"], insert, n),
            "claim_100": _explain(conn, q["job_fetch_available"], _CLAIM, 100),
        }
        claimed = conn.execute(q["job_fetch_available"], _CLAIM).fetchall()
        ids = [r[0] for r in claimed]
        token_at = [c.name for c in conn.execute("SELECT * FROM conveyor_jobs LIMIT 0").description
                    or ()].index("lease_token")
        out["ack_100"] = _explain(conn, q["job_ack_completed"], {
            "id": ids, "lease_token": [r[token_at] for r in claimed], "result": ["null"] * 100,
            "run_time": [0.0] * 100, "node": "probe",
            "finished_channel": "conveyor_jobs_finished"},
            100)
        out["select_1_round_trip_ms"] = _round_trips(conn, "SELECT 1", 500)
        out["one_row_insert_commit_ms"] = _round_trips(
            conn, "INSERT INTO conveyor_jobs (task, queue, state, scheduled_at, created_at)"
            " VALUES ('noop', 'probe', 'available', now(), now()) RETURNING id", 500)
    out["claim_ack_floor"] = floor.claim_ack_loop(target)
    out["copy_floor"] = floor.copy_batches(target)
    out["latency_floor"] = floor.enqueue_to_claim(target)
    target.reset()
    target.close()
    return out


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    backends = args[0].split(",") if args else ["sqlite", "postgres"]
    doc: dict[str, Any] = {"machine": _env.machine(), "busy_before": _env.cpu_busy()}
    if "sqlite" in backends:
        doc["sqlite_cpu_us_per_row"] = sqlite_probe(30_000, 3)
        doc["sqlite_single_insert_commit"] = sqlite_single_insert(5_000)
    if "postgres" in backends:
        with postgres_url(None) as url:
            doc["postgres"] = postgres_probe(url)
    DEFAULT_OUT.mkdir(parents=True, exist_ok=True)
    (DEFAULT_OUT / "probes.json").write_text(json.dumps(doc, indent=2))
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
