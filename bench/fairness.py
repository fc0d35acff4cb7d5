"""``python -m bench.fairness``: fair keys against one tenant's backlog.

Per backend, ``--big`` jobs of fair key ``big`` are enqueued first, then ``--small``
jobs of key ``small``; then one in-process worker (concurrency ``--concurrency``) runs
them. Measured:

* **ordering**: how many ``big`` jobs started before the last ``small`` one did (the
  goal: fewer than 300 for 100 small jobs behind 100,000 big ones);
* **throughput**: jobs/s over the first ``--measure`` starts, with fair keys and in
  the same run without them (the same jobs enqueued without a key: plain claims),
  and the ratio (the goal: at least 0.8).

Medians of ``--rounds``; each round runs keyed then plain. Writes
``bench/results/fairness.json`` with the machine and its commit, as the other tools do.
Example: ``python -m bench.fairness --rounds 1``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from conveyor import Conveyor, WorkerConfig
from conveyor._runtime import Worker

from . import _env
from .__main__ import DEFAULT_OUT, postgres_url
from ._targets import Target

#: Jobs per enqueue_many call.
BATCH = 5000


def _app(url: str, starts: list[str]) -> Conveyor:
    app = Conveyor(url)

    @app.task(queue="bench", fair_key=lambda tenant, *_: tenant)
    async def keyed(tenant: str, i: int) -> None:
        starts.append(tenant)

    @app.task(queue="bench")
    async def plain(tenant: str, i: int) -> None:
        starts.append(tenant)

    return app


async def _enqueue(app: Conveyor, task: str, tenant: str, count: int) -> None:
    job = app.tasks[task].job
    for start in range(0, count, BATCH):
        await app.enqueue_many_async([job(tenant, i)
                                      for i in range(start, min(start + BATCH, count))])


async def _run(target: Target, mode: str, big: int, small: int, concurrency: int,
               measure: int) -> dict[str, Any]:
    """One run: enqueue, then a worker until ``measure`` jobs started and every small
    one did; returns its figures."""
    target.reset()
    starts: list[str] = []
    app = _app(target.url, starts)
    task = "keyed" if mode == "fair" else "plain"
    try:
        await _enqueue(app, task, "big", big)
        await _enqueue(app, task, "small", small)
        config = WorkerConfig(queues={"bench": concurrency}, fetch_limit=concurrency)
        worker = Worker(app.registry, await app.storage(), config)
        began = time.perf_counter()
        measured_at = None
        running = asyncio.create_task(worker.run())
        deadline = began + 600
        # the plain run stops at ``measure``: its small jobs wait behind every big one
        while len(starts) < measure or (mode == "fair" and starts.count("small") < small):
            if running.done():
                await running
                raise RuntimeError("the worker stopped early")
            if measured_at is None and len(starts) >= measure:
                measured_at = time.perf_counter()
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{mode}: {len(starts)} starts in 600 s")
            await asyncio.sleep(0.002)
        measured_at = measured_at or time.perf_counter()
        worker.request_stop()
        await asyncio.wait_for(running, 60)
    finally:
        await app.close_async()
    seen = list(starts)
    smalls = [i for i, key in enumerate(seen) if key == "small"]
    big_before_last_small = (seen[:smalls[-1]].count("big") if len(smalls) == small
                             else None)
    first = seen[:measure]
    seconds = measured_at - began
    return {"mode": mode, "big": big, "small": small, "concurrency": concurrency,
            "measured_starts": len(first), "seconds": round(seconds, 4),
            "jobs_per_s": round(len(first) / seconds, 1),
            "small_started": len(smalls),
            "big_started_before_last_small": big_before_last_small}


def measure(target: Target, big: int, small: int, concurrency: int, count: int,
            rounds: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {"fair": [], "plain": []}
    for _ in range(rounds):
        for mode in runs:
            run = asyncio.run(_run(target, mode, big, small, concurrency, count))
            print(f"{target.backend} {mode}: {run['jobs_per_s']:,.0f} jobs/s, big before "
                  f"the last small: {run['big_started_before_last_small']}", flush=True)
            runs[mode].append(run)
    medians = {m: statistics.median(r["jobs_per_s"] for r in rs) for m, rs in runs.items()}
    before = [r["big_started_before_last_small"] for r in runs["fair"]]
    worst = None if None in before else max(b for b in before if b is not None)
    return {"runs": runs, "median_jobs_per_s": medians,
            "fair_over_plain": round(medians["fair"] / medians["plain"], 3),
            "worst_big_before_last_small": worst,
            "ordering_ok": worst is not None and worst < 300,
            "throughput_ok": medians["fair"] >= 0.8 * medians["plain"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fairness", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--big", type=int, default=100_000)
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--measure", type=int, default=20_000,
                        help="starts over which jobs/s is measured")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--pg-url", default=None,
                        help="as for python -m bench (default: a private default cluster)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT / "fairness.json")
    args = parser.parse_args(argv)
    doc: dict[str, Any] = {"machine": _env.machine(), "big": args.big, "small": args.small,
                           "concurrency": args.concurrency, "measured_starts": args.measure,
                           "rounds": args.rounds, "backends": {}}
    work = Path(tempfile.mkdtemp(prefix="conveyor-fairness-"))
    sizes = (args.big, args.small, args.concurrency, args.measure, args.rounds)
    for backend in args.backends.split(","):
        if backend == "sqlite":
            target = Target.sqlite(work)
            doc["backends"]["sqlite"] = measure(target, *sizes)
            target.close()
            continue
        with postgres_url(args.pg_url) as url:
            target = Target.postgres(url, work)
            try:
                doc["backends"]["postgres"] = measure(target, *sizes)
                target.reset()
            finally:
                target.close()
    doc["loadavg_1m_at_end"] = _env.machine()["loadavg_1m"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, default=str))
    summary = {b: {k: r[k] for k in ("median_jobs_per_s", "fair_over_plain",
                                     "worst_big_before_last_small")}
               for b, r in doc["backends"].items()}
    print(json.dumps(summary, indent=2))
    ok = all(r["ordering_ok"] and r["throughput_ok"] for r in doc["backends"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
