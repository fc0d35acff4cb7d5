"""Workloads 1 and 2: bulk enqueue and single enqueue, through the public API."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from conveyor import Task
from conveyor.cli.bench import BenchApp, measured, percentiles, run_bulk, run_single

from ._targets import Target
from .apps import register


def bulk(target: Target, total: int, batch: int) -> dict[str, Any]:
    """Workload 1: ``total`` jobs through ``app.enqueue_many`` in batches of ``batch``."""
    target.reset()
    app = BenchApp(target.url)
    try:
        return run_bulk(app, register(app)["noop"], total, batch)
    finally:
        app.close()


def bulk_ids(target: Target, total: int, batch: int) -> dict[str, Any]:
    """Workload 1, ids only: ``app.enqueue_many_ids`` (no Job built; COPY on PostgreSQL),
    specs built inside the measurement as in ``bulk``."""
    target.reset()
    app = BenchApp(target.url)
    try:
        task = register(app)["noop"]
        task.enqueue(-1)  # open the storage outside the measurement
        out: dict[str, Any] = {"workload": "bulk", "batch": batch, "returns": "ids"}
        with measured(app, total, out):
            for start in range(0, total, batch):
                app.enqueue_many_ids([task.job(i) for i in range(start, min(start + batch, total))])
        return out
    finally:
        app.close()


def single(target: Target, total: int, threads: int) -> dict[str, Any]:
    """Workload 2: ``task.enqueue(i)`` from ``threads`` threads, one transaction each."""
    target.reset()
    app = BenchApp(target.url)
    try:
        return run_single(app, register(app)["noop"], total, threads)
    finally:
        app.close()


def single_async(target: Target, total: int, producers: int) -> dict[str, Any]:
    """Workload 2 on one event loop: ``producers`` coroutines, each awaiting
    ``task.enqueue_async(i)`` in turn (1: a plain loop, one commit per job; more: the
    calls in flight together are pipelined into shared batches)."""
    target.reset()
    app = BenchApp(target.url)
    task: Task[Any, Any] = register(app)["noop"]
    out: dict[str, Any] = {"workload": "single", "api": "enqueue_async", "producers": producers}
    per_producer = total // producers
    latencies: list[float] = []

    async def produce() -> None:
        clock, enqueue = time.perf_counter, task.enqueue_async
        for i in range(per_producer):
            began = clock()
            await enqueue(i)
            latencies.append(clock() - began)

    async def main() -> None:
        await task.enqueue_async(-1)  # open the storage outside the measurement
        with measured(app, per_producer * producers, out):
            await asyncio.gather(*(produce() for _ in range(producers)))
        await app.close_async()

    try:
        asyncio.run(main())
    finally:
        app.close()
    out.update(percentiles(latencies))
    return out
