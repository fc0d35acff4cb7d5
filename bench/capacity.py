"""``python -m bench.capacity``: the deterministic figures of docs/scaling.md's capacity
model, on PostgreSQL (a private default cluster unless ``--pg-url``).

* Table and index sizes per million jobs: ``--rows`` jobs inserted through the public
  bulk path (``enqueue_many``, batches of 10,000), then moved to each state mix with one
  UPDATE (the columns an ack or a discard writes) and compacted (``VACUUM FULL``), so
  the sizes are the live data's, not a moment's bloat; ``pg_relation_size`` per heap,
  TOAST and index.
* WAL per job (``pg_stat_wal``: records, full-page images, bytes) for the insert, for
  the claim + ack of a real burst worker, and for the prune that deletes the rows.
* Database CPU per job in that burn-down (the worker's backends, from ``/proc``) and the
  connections the worker held: jobs/s per PostgreSQL core and connections per process.
* The pool settings that bound connections per process (``ConveyorConfig``,
  ``PostgresConfig``).

Writes ``bench/results/capacity.json``. Sizes and WAL do not depend on the machine's
load; CPU per job does somewhat (cache misses), so it is marked as load-sensitive.
Example: ``python -m bench.capacity --rows 100000``
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

from conveyor import ConveyorConfig
from conveyor._storage.postgres.connection import PostgresConfig
from conveyor.cli.bench import BenchApp

from . import _env
from .__main__ import DEFAULT_OUT, postgres_url
from ._targets import Target
from ._worker import WorkerProcess
from .apps import register
from .w_workers import APP_PREFIX, ConnectionSampler, collect, named_url

#: state mix -> the UPDATE that puts every row in it (the columns the runtime writes).
#: 'retention day': 1% still available, 99% completed, what a 1-day retention keeps.
#: Times differ per row (``id`` ms apart), as real ones do: equal keys would let B-tree
#: deduplication shrink the time indexes far below their real size.
MIXES: dict[str, str] = {
    "available": "",
    "scheduled": "UPDATE conveyor_jobs SET state = 'scheduled',"
                 " scheduled_at = now() + interval '1 day' + id * interval '1 ms'",
    "completed": "UPDATE conveyor_jobs SET state = 'completed', attempt = 1,"
                 " attempted_at = now(), finished_at = now() + id * interval '1 ms', result = 'null',"
                 " ran_on = 'host-1234', run_time = 0.001",
    "retention day (99% completed, 1% available)":
        "UPDATE conveyor_jobs SET state = CASE WHEN id %% 100 = 0 THEN 'available'"
        " ELSE 'completed' END, attempt = CASE WHEN id %% 100 = 0 THEN 0 ELSE 1 END,"
        " attempted_at = now(), finished_at = CASE WHEN id %% 100 = 0 THEN NULL"
        " ELSE now() + id * interval '1 ms' END,"
        " result = CASE WHEN id %% 100 = 0 THEN NULL ELSE 'null'::jsonb END,"
        " ran_on = 'host-1234', run_time = 0.001",
    "discarded (one error with a 1 kB traceback)":
        "UPDATE conveyor_jobs SET state = 'discarded', attempt = 1, attempted_at = now(),"
        " finished_at = now() + id * interval '1 ms', errors = jsonb_build_array(jsonb_build_object("
        "'attempt', 1, 'at', now(), 'error', 'RuntimeError: boom',"
        " 'traceback', repeat('x', 1000)))",
}

RELATIONS_SQL = """
SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c
WHERE c.oid = 'conveyor_jobs'::regclass
   OR c.oid = (SELECT reltoastrelid FROM pg_class WHERE oid = 'conveyor_jobs'::regclass)
   OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'conveyor_jobs'::regclass)
ORDER BY c.relname"""

#: Records and the bytes of records and of full-page images between two WAL positions (pg_walinspect,
#: PostgreSQL 15+): exact, unlike pg_stat_wal, which other backends flush late.
WAL_STATS_SQL = """
SELECT sum(count), sum(record_size), sum(fpi_size)
FROM pg_get_wal_stats(%(start)s::pg_lsn, %(end)s::pg_lsn)"""


class WalMeter:
    """WAL written by one phase: ``with meter.phase("name", jobs): ...``."""

    def __init__(self, target: Target) -> None:
        self._target = target
        self.per_job: dict[str, dict[str, Any]] = {}
        try:
            target.query("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
            self.inspect = True
        except psycopg.Error:
            self.inspect = False  # only bytes, from the LSN difference

    @contextlib.contextmanager
    def phase(self, name: str, jobs: int) -> Iterator[None]:
        self._target.query("CHECKPOINT")  # every page's first change logs a full image
        start = self._target.query("SELECT pg_current_wal_insert_lsn()::text")[0][0]
        yield
        # commits are flushed, so the flush position covers every commit of the phase
        end = self._target.query("SELECT pg_current_wal_flush_lsn()::text")[0][0]
        size = self._target.query("SELECT pg_wal_lsn_diff(%(e)s::pg_lsn, %(s)s::pg_lsn)",
                                  {"e": end, "s": start})[0][0]
        out: dict[str, Any] = {"bytes": round(float(size) / jobs, 1)}
        row = None
        if self.inspect:
            try:  # a checkpoint on a busy server may have recycled the segments already
                row = self._target.query(WAL_STATS_SQL, {"start": start, "end": end})[0]
            except psycopg.Error as exc:
                out["records_unavailable"] = str(exc).splitlines()[0]
        if row is not None:
            records, rec_bytes, fpi_bytes = (float(v or 0) for v in row)
            out.update(records=round(records / jobs, 2), record_bytes=round(rec_bytes / jobs, 1),
                       full_page_image_bytes=round(fpi_bytes / jobs, 1))
        self.per_job[name] = out


def _insert(target: Target, rows: int, url: str | None = None) -> None:
    app = BenchApp(url or target.url)
    try:
        task = register(app)["noop"]
        for start in range(0, rows, 10_000):
            app.enqueue_many([task.job(i) for i in range(start, min(start + 10_000, rows))])
    finally:
        app.close()


def sizes(target: Target, rows: int) -> dict[str, Any]:
    """Bytes per million jobs per relation, in each state mix."""
    target.reset()
    _insert(target, rows)
    out: dict[str, Any] = {}
    for mix, update in MIXES.items():
        if update:
            target.query(update)
        target.query("VACUUM FULL conveyor_jobs")
        target.query("ANALYZE conveyor_jobs")
        per = {name: round(size * 1e6 / rows) for name, size in target.query(RELATIONS_SQL)}
        heap = per.pop("conveyor_jobs")
        toast = sum(v for k, v in per.items() if k.startswith("pg_toast"))
        indexes = {k: v for k, v in per.items() if not k.startswith("pg_toast")}
        out[mix] = {"heap_bytes": heap, "toast_bytes": toast, "index_bytes": indexes,
                    "indexes_total_bytes": sum(indexes.values()),
                    "total_bytes": heap + toast + sum(indexes.values())}
    return out


def _cpu_us(sampler: ConnectionSampler, jobs: int) -> float | None:
    cpu = sampler.backend_cpu_s
    return None if cpu is None else round(cpu * 1e6 / jobs, 2)


def lifecycle(target: Target, jobs: int, concurrency: int) -> dict[str, Any]:
    """WAL and database CPU per job for the insert, the claim + ack of a real worker and
    the prune; the worker's connections. Each client connects with an application_name
    the sampler follows (its backends' CPU is read every 50 ms: the last few ms of a
    phase can be missed, so CPU figures are a little low, never high)."""
    target.reset()
    wal, cpu = WalMeter(target), {}
    name = named_url(target.url, f"{APP_PREFIX}0")
    with wal.phase("insert (enqueue_many)", jobs), ConnectionSampler(target.url) as sampler:
        _insert(target, jobs, name)
    cpu["insert (enqueue_many)"] = _cpu_us(sampler, jobs)
    with wal.phase("claim + ack (worker)", jobs), ConnectionSampler(target.url) as sampler:
        worker = WorkerProcess(target, "bench", concurrency, burst=True, url=name)
        run = collect([worker], 1800, False)[0]
    cpu["claim + ack (worker)"] = _cpu_us(sampler, jobs)
    connections = sampler.figures()["connections_peak_per_process"]
    done = target.outcomes("bench", "noop").get("completed/1", 0)
    with wal.phase("prune (delete)", jobs), ConnectionSampler(target.url) as sampler:
        app = BenchApp(name)
        try:
            pruned = app.prune_now(completed_retention=0)
        finally:
            app.close()
    cpu["prune (delete)"] = _cpu_us(sampler, jobs)
    known = [v for v in cpu.values() if v is not None]
    # /proc counts CPU in clock ticks (10 ms): a small run may read none in every phase
    per_core = round(1e6 / sum(known)) if len(known) == 3 and sum(known) > 0 else None
    return {
        "jobs": jobs, "concurrency": concurrency, "completed": done, "pruned": pruned,
        "wal_per_job": wal.per_job,
        "wal_note": "a CHECKPOINT precedes each phase, so each page's first change logs a "
                    "full-page image: the most a phase can cost; record_bytes is the rest",
        "storage_calls_per_job": round(sum(run.report.get("storage_calls", {}).values())
                                       / jobs, 5),
        "load_sensitive": {
            "db_backend_cpu_us_per_job": cpu,
            "jobs_per_s_per_db_core": per_core,
            "worker_cpu_s": round(run.cpu_s, 3),
        },
        "connections_peak": connections,
    }


def pools() -> dict[str, Any]:
    """What bounds the connections of one process: its pools' sizes."""
    pg = PostgresConfig(url="postgresql://")
    main_pool = ConveyorConfig().pool_max_size
    return {
        "pool_max_size (ConveyorConfig, the async pool)": main_pool,
        "pool min_size": pg.min_size,
        "reserved_size (heartbeats and acks)": pg.reserved_size,
        "listener (LISTEN, while a worker runs)": 1,
        "sync enqueue connections (task.enqueue from threads), at most": main_pool,
        "worker process, at most": main_pool + pg.reserved_size + 1,
        "PostgresConfig defaults": {k: v for k, v in dataclasses.asdict(pg).items()
                                    if k != "url"},
    }


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1 (sizes are per job)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.capacity", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=positive, default=1_000_000)
    parser.add_argument("--burndown-jobs", type=positive, default=100_000)
    parser.add_argument("--pg-url", default=None,
                        help="as for python -m bench (default: a private default cluster)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT / "capacity.json")
    args = parser.parse_args(argv)
    doc: dict[str, Any] = {"machine": _env.machine(), "rows": args.rows,
                           "command": " ".join(["python -m bench.capacity",
                                                *(argv if argv is not None else sys.argv[1:])])}
    with postgres_url(args.pg_url) as url:
        target = Target.postgres(url, Path(tempfile.gettempdir()))
        try:
            doc["database"] = target.settings()
            doc["bytes_per_million_jobs"] = sizes(target, args.rows)
            doc["lifecycle"] = lifecycle(target, args.burndown_jobs, 100)
            doc["connections_per_process"] = pools()
            target.reset()
        finally:
            target.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, default=str))
    print(json.dumps({k: v for k, v in doc.items() if k not in ("machine", "database")},
                     indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
