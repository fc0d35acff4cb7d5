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

A search by tag or argument reads the newest ``conveyor._app.search.SCAN`` jobs at
most, so its time does not grow with history. Writes ``bench/results/search.json``
with the machine and its commit. Example: ``python -m bench.search --jobs 200000``
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
