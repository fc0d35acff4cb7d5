"""``python -m bench.model``: docs/scaling.md's capacity model, computed from measured
per-job costs (``bench/results/capacity.json`` and the many-workers results).

For a rate of R jobs/s with a retention of T seconds it gives: the database cores a
job's insert, claim, ack and prune need, the worker processes and the connections they hold,
the WAL written per second and per day, and the hot table's size when every finished
job stays in it for T (today's schema: issue 15's history table would move them out).

Example: ``python -m bench.model --rates 1000,10000,100000 --retention-hours 24``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any

from ._env import DEFAULT_OUT

GB = 1e9


@dataclasses.dataclass(frozen=True)
class Costs:
    """Measured per-job costs: each field names the file and key it comes from."""

    #: capacity.json lifecycle.load_sensitive.db_backend_cpu_us_per_job, summed over
    #: the insert, the claim + ack and the prune: a job's whole life on the server
    db_cpu_us: float
    #: capacity.json lifecycle.wal_per_job.*.bytes, summed (insert, claim + ack, prune)
    wal_bytes: float
    #: capacity.json bytes_per_million_jobs["completed"].total_bytes / 1e6
    completed_row_bytes: float
    #: capacity.json lifecycle.connections_peak (one worker at concurrency 100)
    connections_per_worker: int
    #: capacity.json connections_per_process["worker process, at most"]
    connections_per_worker_max: int
    #: one worker process's burn-down rate, jobs/s (w3 best concurrency, or w9_workers_p1)
    jobs_per_s_per_worker: float

    @classmethod
    def load(cls, out: Path) -> Costs:
        """The costs measured into ``out``; SystemExit saying what to run when missing."""
        path = out / "capacity.json"
        if not path.exists():
            raise SystemExit(f"{path} is missing: run `python -m bench.capacity` first")
        cap = json.loads(path.read_text())
        life = cap["lifecycle"]
        w3 = [json.loads(p.read_text())["median"].get("jobs_per_s", 0)
              for p in out.glob("postgres_w3_burndown_c*.json")]
        return cls(
            # math.fsum: a float sum that is the same on every Python (3.12 changed
            # sum()'s rounding), so a figure rendered on one is what another renders
            db_cpu_us=math.fsum(v or 0 for v in
                                life["load_sensitive"]["db_backend_cpu_us_per_job"].values()),
            wal_bytes=math.fsum(p["bytes"] for p in life["wal_per_job"].values()),
            completed_row_bytes=cap["bytes_per_million_jobs"]["completed"]["total_bytes"] / 1e6,
            connections_per_worker=life["connections_peak"],
            connections_per_worker_max=cap["connections_per_process"]["worker process, at most"],
            jobs_per_s_per_worker=max(w3, default=0) or 20_000.0,
        )


def scenario(costs: Costs, rate: float, retention_s: float, handler_ms: float = 10.0,
             concurrency: int = 50, max_connections: int = 100) -> dict[str, Any]:
    """What ``rate`` jobs/s costs. A worker process runs ``concurrency`` handlers of
    ``handler_ms`` each (at most the no-op burn-down's rate), with a margin of 2."""
    per_worker = min(costs.jobs_per_s_per_worker, concurrency * 1000 / handler_ms)
    workers = max(1, math.ceil(2 * rate / per_worker))
    connections = workers * costs.connections_per_worker
    return {
        "jobs_per_s": int(rate),
        "db_cores": round(rate * costs.db_cpu_us / 1e6, 2),
        "worker_processes": workers,
        "connections_typical": connections,
        "connections_worst": workers * costs.connections_per_worker_max,
        "fits_max_connections": connections <= max_connections,
        "wal_mb_per_s": round(rate * costs.wal_bytes / 1e6, 1),
        "wal_gb_per_day": round(rate * costs.wal_bytes * 86_400 / GB),
        "hot_table_gb_at_retention": round(rate * retention_s * costs.completed_row_bytes / GB,
                                           1),
    }


def markdown(costs: Costs, rows: list[dict[str, Any]], retention_h: float) -> str:
    head = ["jobs/s", "db cores (insert+claim+ack+prune)", "worker processes", "connections (typical)",
            "connections (pools full)", "WAL MB/s", "WAL GB/day",
            f"hot table GB ({retention_h:g} h retention)"]
    keys = ["jobs_per_s", "db_cores", "worker_processes", "connections_typical",
            "connections_worst", "wal_mb_per_s", "wal_gb_per_day", "hot_table_gb_at_retention"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for row in rows:
        lines.append("| " + " | ".join(f"{row[k]:,}" for k in keys) + " |")
    inputs = ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(costs).items())
    return "\n".join(lines) + f"\n\nInputs: {inputs}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.model", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="1000,10000,100000")
    parser.add_argument("--retention-hours", type=float, default=24.0)
    parser.add_argument("--handler-ms", type=float, default=10.0,
                        help="mean handler time (a worker runs --concurrency at once)")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--results", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    try:
        rates = [float(r) for r in args.rates.split(",") if r]
    except ValueError:
        parser.error(f"--rates takes numbers separated by commas, got {args.rates!r}")
    if not rates or min(rates) <= 0 or args.handler_ms <= 0 or args.concurrency < 1:
        parser.error("rates and --handler-ms must be above 0, --concurrency at least 1")
    costs = Costs.load(args.results)
    rows = [scenario(costs, float(r), args.retention_hours * 3600, args.handler_ms,
                     args.concurrency) for r in rates]
    print(markdown(costs, rows, args.retention_hours))
    return 0


if __name__ == "__main__":
    sys.exit(main())
