"""``python -m bench.search``: finding jobs by tag and by argument value among a million
finished jobs.

Per backend, ``--jobs`` finished jobs are written straight into the history table by
one ``INSERT ... SELECT`` over a generated series (server-side: no row crosses the
wire, faster than COPY), cloned from a real job the archiver moved, each with its own
kwargs ``{"order_id": i, "customer": {"id": i % 5000, ...}, "note": ...}`` and tag
``t<i % 100>``; then ``--hot`` waiting jobs are enqueued through the API. Each search is
``app.list_jobs(..., limit=50)`` as the CLI and the dashboard make it, timed
``--rounds`` times (the median and the worst are kept):

* a recent order id (one match: the scan covers the whole bound),
* an old order id, outside the bound (no match: the worst case, the whole bound),
* a nested value matching 1 job in 5,000,
* a tag on 1% of the jobs (50 found early), and a tag with an argument.

Each request by tag or argument reads one window of ``conveyor._app.search.SCAN`` ids
at most, so its time does not grow with history. Then the walk: the oldest order id
(job 1) found by going on window after window, ``app.search_jobs(...,
before_id=page.next_before_id)`` as a caller, the CLI, the dashboard's "Search older"
link and the HTTP API's ``next`` do: the total time, the number of requests and each
request's time (median and worst), ``--rounds`` walks. On PostgreSQL, last, what a GIN
index on history's kwargs would cost the archiver (``_gin_cost``). Writes
``bench/results/search.json`` with the machine and its commit. Example:
``python -m bench.search --jobs 200000``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from conveyor import Conveyor
from conveyor._app.search import SCAN
from conveyor._runtime.archiver import Archiver

from . import _env
from .__main__ import DEFAULT_OUT, postgres_url
from ._targets import Target

#: The kwargs of generated job ``i``, per dialect (``i`` is the series' column).
KWARGS = {
    "sqlite": ("json_object('order_id', i, 'customer', json_object('id', i % 5000, 'tier', "
               "CASE WHEN i % 3 = 0 THEN 'gold' ELSE 'silver' END), 'note', 'order ' || i)"),
    "postgres": ("jsonb_build_object('order_id', i, 'customer', jsonb_build_object('id', "
                 "i %% 5000, 'tier', CASE WHEN i %% 3 = 0 THEN 'gold' ELSE 'silver' END), "
                 "'note', 'order ' || i)"),
}
TAGS = {"sqlite": "json_array('t' || (i % 100))",
        "postgres": "jsonb_build_array('t' || (i %% 100))"}


def _columns(target: Target) -> list[str]:
    if target.backend == "sqlite":
        return [r[1] for r in target.query("PRAGMA table_info(conveyor_jobs_history)")]
    return [r[0] for r in target.query(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = "
        "current_schema() AND table_name = 'conveyor_jobs_history' ORDER BY ordinal_position")]


def _load(target: Target, jobs: int) -> float:
    """``jobs`` finished jobs with ids 1..jobs in history, cloned from the one there."""
    columns = _columns(target)
    made = {"id": "i", "kwargs": KWARGS[target.backend], "tags": TAGS[target.backend],
            "args": "'[]'"}
    select = ", ".join(made.get(c, f"t.{c}") for c in columns)
    names = ", ".join(columns)
    began = time.perf_counter()
    if target.backend == "sqlite":
        target.query("BEGIN")
        target.query("CREATE TEMP TABLE seed AS SELECT * FROM conveyor_jobs_history")
        target.query("DELETE FROM conveyor_jobs_history")
        target.query(  # the columns are the table's own
            f"INSERT INTO conveyor_jobs_history ({names}) "  # noqa: S608
            f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :jobs) "
            f"SELECT {select} FROM n CROSS JOIN seed AS t", {"jobs": jobs})
        target.query("UPDATE sqlite_sequence SET seq = :jobs WHERE name = 'conveyor_jobs'",
                     {"jobs": jobs})
        target.query("COMMIT")
    else:
        target.query("CREATE TEMP TABLE seed AS SELECT * FROM conveyor_jobs_history")
        target.query("DELETE FROM conveyor_jobs_history")
        target.query(  # the columns are the table's own
            f"INSERT INTO conveyor_jobs_history ({names}) SELECT {select} "  # noqa: S608
            f"FROM generate_series(1, %(jobs)s::bigint) AS g(i) CROSS JOIN seed AS t",
            {"jobs": jobs})
        target.query("SELECT setval(pg_get_serial_sequence('conveyor_jobs', 'id'), %(jobs)s)",
                     {"jobs": jobs})
        target.query("ANALYZE conveyor_jobs_history")  # as autovacuum would after a load
    return time.perf_counter() - began


def _app(url: str) -> Conveyor:
    app = Conveyor(url)

    @app.task(name="charge", queue="bench")
    def charge(*args: Any, **kwargs: Any) -> None: ...

    return app


def _seed(app: Conveyor, hot: int) -> None:
    """One finished job in history (the clone's model), and ``hot`` waiting ones."""
    task = app.tasks["charge"]
    first = task.enqueue(order_id=0)
    app.cancel_job(first.id)

    async def archive() -> None:
        await Archiver(await app.storage(), None, 1.0, after=0.0).run_once()

    app._sync(archive())
    for start in range(0, hot, 1000):
        app.enqueue_many([task.options(delay=3600, tags=[f"t{i % 100}"]).job(order_id=-i)
                          for i in range(start, min(start + 1000, hot))])


def _searches(jobs: int) -> dict[str, dict[str, Any]]:
    recent, old = jobs - 10, 5
    return {
        "recent_order_id": {"args_contains": {"order_id": recent}},
        "old_order_id_outside_the_bound": {"args_contains": {"order_id": old}},
        "nested_customer_id": {"args_contains": {"customer": {"id": 42}}},
        "tag_1_percent": {"tag": "t7"},
        "tag_and_argument": {"tag": "t7", "args_contains": {"customer": {"tier": "gold"}}},
    }


def _time(app: Conveyor, search: dict[str, Any], rounds: int) -> dict[str, Any]:
    times, found = [], 0
    for _ in range(rounds):
        began = time.perf_counter()
        found = len(app.list_jobs(limit=50, **search))
        times.append((time.perf_counter() - began) * 1000)
    return {"filter": json.dumps(search, sort_keys=True), "found": found,
            "median_ms": round(statistics.median(times), 1), "max_ms": round(max(times), 1)}


def _walk(app: Conveyor, search: dict[str, Any], rounds: int) -> dict[str, Any]:
    """Find the match by going on from window to window, ``rounds`` times."""
    totals: list[float] = []
    each: list[float] = []
    requests = found = 0
    for _ in range(rounds):
        began, before, requests = time.perf_counter(), None, 0
        while True:
            asked = time.perf_counter()
            page = app.search_jobs(limit=50, before_id=before, **search)
            each.append((time.perf_counter() - asked) * 1000)
            requests += 1
            if page.jobs or page.next_before_id is None:
                break
            before = page.next_before_id
        totals.append((time.perf_counter() - began) * 1000)
        found = len(page.jobs)
    return {"filter": json.dumps(search, sort_keys=True), "found": found,
            "requests": requests, "total_median_ms": round(statistics.median(totals), 1),
            "total_max_ms": round(max(totals), 1),
            "request_median_ms": round(statistics.median(each), 1),
            "request_max_ms": round(max(each), 1)}


#: The GIN side measurement: rows copied as the archiver copies them, per batch.
GIN_ROWS, GIN_BATCH, GIN_ROUNDS = 100_000, 5000, 3


def _gin_cost(target: Target) -> dict[str, Any]:
    """PostgreSQL: what a ``jsonb_path_ops`` GIN index on history's kwargs would cost
    the archiver. ``GIN_ROWS`` of the loaded history are copied into a table like
    history, ``GIN_BATCH`` at a time (the archiver's ``INSERT ... SELECT``), with and
    without the index, alternating, ``GIN_ROUNDS`` times each; then dropped."""
    target.query("CREATE UNLOGGED TABLE gin_src AS SELECT * FROM conveyor_jobs_history "
                 "WHERE id <= %(n)s", {"n": GIN_ROWS})
    times: dict[str, list[float]] = {"plain": [], "gin": []}
    sizes = (0, 0)
    try:
        for _ in range(GIN_ROUNDS):
            for side in times:
                target.query("DROP TABLE IF EXISTS gin_h")
                target.query("CREATE TABLE gin_h (LIKE conveyor_jobs_history INCLUDING ALL)")
                if side == "gin":
                    target.query("CREATE INDEX gin_h_kwargs ON gin_h USING gin "
                                 "(kwargs jsonb_path_ops)")
                began = time.perf_counter()
                for low in range(1, GIN_ROWS + 1, GIN_BATCH):
                    target.query("INSERT INTO gin_h SELECT * FROM gin_src WHERE id >= %(a)s "
                                 "AND id < %(b)s", {"a": low, "b": low + GIN_BATCH})
                times[side].append(time.perf_counter() - began)
                if side == "gin":
                    found = target.query("SELECT pg_relation_size('gin_h'), "
                                         "pg_relation_size('gin_h_kwargs')")
                    sizes = (int(found[0][0]), int(found[0][1]))
    finally:
        target.query("DROP TABLE IF EXISTS gin_h")
        target.query("DROP TABLE IF EXISTS gin_src")
    ratios = [g / p for p, g in zip(times["plain"], times["gin"], strict=True)]
    return {"rows": GIN_ROWS, "batch": GIN_BATCH, "rounds": GIN_ROUNDS,
            "plain_median_s": round(statistics.median(times["plain"]), 2),
            "gin_median_s": round(statistics.median(times["gin"]), 2),
            "ratio_median": round(statistics.median(ratios), 2),
            "ratio_min": round(min(ratios), 2), "ratio_max": round(max(ratios), 2),
            "heap_mb": round(sizes[0] / 2**20, 1), "index_mb": round(sizes[1] / 2**20, 1)}


def measure(target: Target, jobs: int, hot: int, rounds: int) -> dict[str, Any]:
    target.reset()
    app = _app(target.url)
    try:
        _seed(app, 0)
        target.close()
        seconds = _load(target, jobs)
        target.close()
        print(f"{target.backend}: {jobs:,} finished jobs loaded in {seconds:.1f} s", flush=True)
        _seed(app, hot)
        out: dict[str, Any] = {"load_seconds": round(seconds, 1), "searches": {}}
        for name, search in _searches(jobs).items():
            row = _time(app, search, rounds)
            out["searches"][name] = row
            print(f"{target.backend} {name}: {row['median_ms']} ms median, "
                  f"{row['max_ms']} ms worst, {row['found']} found", flush=True)
        walk = _walk(app, {"args_contains": {"order_id": 1}}, rounds)
        out["oldest_order_id_window_by_window"] = walk
        print(f"{target.backend} oldest order id, window by window: {walk['found']} found in "
              f"{walk['requests']} requests, {walk['total_median_ms']} ms median in all "
              f"({walk['total_max_ms']} ms worst), each request {walk['request_median_ms']} ms "
              f"median ({walk['request_max_ms']} ms worst)", flush=True)
        if target.backend == "postgres":
            gin = out["gin_on_history_kwargs"] = _gin_cost(target)
            print(f"postgres GIN on history kwargs: archive-like insert {gin['ratio_median']}x "
                  f"as long ({gin['plain_median_s']} s -> {gin['gin_median_s']} s), index "
                  f"{gin['index_mb']} MB per {gin['rows']:,} rows", flush=True)
        return out
    finally:
        app.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.search", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1_000_000, help="finished jobs in history")
    parser.add_argument("--hot", type=int, default=1000, help="waiting jobs in the hot table")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--pg-url", default=None,
                        help="as for python -m bench (default: a private default cluster)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT / "search.json")
    args = parser.parse_args(argv)
    doc: dict[str, Any] = {"machine": _env.machine(), "jobs": args.jobs, "hot": args.hot,
                           "scan_bound": SCAN, "rounds": args.rounds, "limit": 50,
                           "backends": {}}
    work = Path(tempfile.mkdtemp(prefix="conveyor-search-"))
    for backend in args.backends.split(","):
        if backend == "sqlite":
            target = Target.sqlite(work)
            try:
                doc["backends"]["sqlite"] = measure(target, args.jobs, args.hot, args.rounds)
            finally:
                target.close()
            continue
        with postgres_url(args.pg_url) as url:
            target = Target.postgres(url, work)
            try:
                doc["backends"]["postgres"] = measure(target, args.jobs, args.hot, args.rounds)
                target.reset()
            finally:
                target.close()
    doc["loadavg_1m_at_end"] = _env.machine()["loadavg_1m"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
