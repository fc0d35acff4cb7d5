"""``python -m bench.chunks``: throughput of small jobs run in chunks
(``@app.task(chunk=Chunk(size=100, wait=0.05))``) against the same jobs run one by one.

Per backend and workload, ``--jobs`` jobs are enqueued first, then one in-process worker
(concurrency ``--concurrency``) runs them; jobs/s runs from the worker's start to its
last written outcome, and every job must end completed with its own result. Two
workloads: ``noop`` (the handler does nothing: the queue's own cost per job) and
``call_2ms`` (each handler call makes one 2 ms call, e.g. to an API or a database that
takes a batch as cheaply as one item: the case chunks are for). Medians of
``--rounds``; each round runs plain then chunked.

Writes ``bench/results/chunks.json`` with the machine and its commit, as the other
tools do. Example: ``python -m bench.chunks --rounds 3``
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

from conveyor import Chunk, ChunkJob, Conveyor, WorkerConfig
from conveyor._runtime import Worker

from . import _env
from .__main__ import DEFAULT_OUT, postgres_url
from ._targets import Target

CHUNK = Chunk(size=100, wait=0.05)
WORKLOADS = {"noop": 0.0, "call_2ms": 0.002}


def _app(url: str, call: float) -> Conveyor:
    app = Conveyor(url)

    @app.task(queue="bench")
    async def small(i: int) -> int:
        if call:
            await asyncio.sleep(call)
        return i

    @app.task(queue="bench", chunk=CHUNK)
    async def small_chunk(jobs: list[ChunkJob]) -> list[int]:
        if call:
            await asyncio.sleep(call)
        return [j.args[0] for j in jobs]

    return app


async def _all_completed(app: Conveyor, task: str, jobs: int) -> bool:
    """Every job of ``task`` completed, each with its own result (read page by page)."""
    seen, before = 0, None
    while True:
        page = await app.list_jobs_async(task=task, limit=5000, before_id=before)
        if any(j.state.value != "completed" or j.result != j.args[0] for j in page):
            return False
        seen += len(page)
        if len(page) < 5000:
            return seen == jobs
        before = page[-1].id


async def _run(target: Target, mode: str, workload: str, jobs: int,
               concurrency: int) -> dict[str, Any]:
    """One burn-down of ``jobs`` jobs; returns its figures."""
    target.reset()
    app = _app(target.url, WORKLOADS[workload])
    task = app.tasks["small_chunk" if mode == "chunked" else "small"]
    try:
        for start in range(0, jobs, 5000):
            await app.enqueue_many_async([task.job(i) for i in range(start, min(start + 5000, jobs))])
        config = WorkerConfig(queues={"bench": concurrency}, fetch_limit=500)
        worker = Worker(app.registry, await app.storage(), config)
        began = time.perf_counter()
        running = asyncio.create_task(worker.run())
        while worker.completed < jobs:
            if running.done():
                await running
                raise RuntimeError("the worker stopped before every job completed")
            await asyncio.sleep(0.005)
        seconds = time.perf_counter() - began
        worker.request_stop()
        await asyncio.wait_for(running, 60)
        correct = await _all_completed(app, task.name, jobs)
    finally:
        await app.close_async()
    return {"mode": mode, "workload": workload, "jobs": jobs, "concurrency": concurrency,
            "seconds": round(seconds, 4), "jobs_per_s": round(jobs / seconds, 1),
            "all_completed_with_their_results": correct}


def measure(target: Target, jobs: int, concurrency: int, rounds: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for workload in WORKLOADS:
        runs: dict[str, list[dict[str, Any]]] = {"plain": [], "chunked": []}
        for _ in range(rounds):
            for mode in runs:
                run = asyncio.run(_run(target, mode, workload, jobs, concurrency))
                print(f"{target.backend} {workload} {mode}: {run['jobs_per_s']:,.0f} jobs/s",
                      flush=True)
                runs[mode].append(run)
        medians = {m: statistics.median(r["jobs_per_s"] for r in rs) for m, rs in runs.items()}
        out[workload] = {
            "runs": runs, "median_jobs_per_s": medians,
            "chunked_over_plain": round(medians["chunked"] / medians["plain"], 2),
            "all_correct": all(r["all_completed_with_their_results"]
                               for rs in runs.values() for r in rs),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chunks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--pg-url", default=None,
                        help="as for python -m bench (default: a private default cluster)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT / "chunks.json")
    args = parser.parse_args(argv)
    doc: dict[str, Any] = {"machine": _env.machine(), "chunk": {"size": CHUNK.size,
                                                                "wait": CHUNK.wait},
                           "jobs": args.jobs, "concurrency": args.concurrency,
                           "rounds": args.rounds, "backends": {}}
    work = Path(tempfile.mkdtemp(prefix="conveyor-chunks-"))
    for backend in args.backends.split(","):
        if backend == "sqlite":
            target = Target.sqlite(work)
            doc["backends"]["sqlite"] = measure(target, args.jobs, args.concurrency, args.rounds)
            target.close()
            continue
        with postgres_url(args.pg_url) as url:
            target = Target.postgres(url, work)
            try:
                doc["backends"]["postgres"] = measure(target, args.jobs, args.concurrency,
                                                      args.rounds)
                target.reset()
            finally:
                target.close()
    doc["loadavg_1m_at_end"] = _env.machine()["loadavg_1m"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, default=str))
    summary = {b: {w: (r["median_jobs_per_s"], r["chunked_over_plain"]) for w, r in ws.items()}
               for b, ws in doc["backends"].items()}
    print(json.dumps(summary, indent=2))
    ok = all(r["all_correct"] for ws in doc["backends"].values() for r in ws.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
