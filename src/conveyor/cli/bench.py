"""``conveyor bench``: measure Conveyor on your own machine and database.

Every job it writes is in the ``conveyor-bench`` queue (task ``conveyor_bench_noop``),
and it only ever deletes rows of that queue, before and after the run: your jobs are
never touched. Figures: jobs/s, per-call latency, Python CPU microseconds per job and
database round trips per job (storage calls, counted by wrapping the storage).

The functions here are also what the repository's benchmark suite (``bench/``) runs.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import inspect
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import click

from .._app import Conveyor, Storage
from .._app.operations import Operations
from .._config import WorkerConfig
from .._task import Task
from ._loading import check_url, resolve_url

QUEUE = "conveyor-bench"
TASK = "conveyor_bench_noop"
WORKLOADS = ("bulk", "single", "e2e", "latency")
#: Storage methods that are bookkeeping, not database round trips.
_NOT_CALLS = frozenset({"open", "close", "wake_subscribe", "capabilities"})


class CountingStorage:
    """A storage proxy counting calls per method; each call is one database round trip.

    ``on_ack(applied)`` runs after every ``job_ack_many`` with the ids it applied.
    """

    def __init__(self, inner: Storage, calls: collections.Counter[str],
                 on_ack: Callable[[list[int]], None] | None = None) -> None:
        self._inner, self._calls, self._on_ack = inner, calls, on_ack

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name.startswith("_") or name in _NOT_CALLS or not callable(attr):
            return attr
        calls = self._calls
        if inspect.iscoroutinefunction(attr):
            on_ack = self._on_ack if name == "job_ack_many" else None

            @functools.wraps(attr)
            async def counted(*args: Any, **kwargs: Any) -> Any:
                calls[name] += 1
                result = await attr(*args, **kwargs)
                if on_ack is not None:
                    on_ack(result)
                return result

            wrapper: Any = counted
        else:

            @functools.wraps(attr)
            def counted_sync(*args: Any, **kwargs: Any) -> Any:
                calls[name] += 1
                return attr(*args, **kwargs)

            wrapper = counted_sync
        setattr(self, name, wrapper)  # the next lookup skips __getattr__
        return wrapper


class BenchApp(Conveyor):
    """A Conveyor whose storages count their calls (``app.calls``) and note each ack:
    every storage it opens is wrapped (``wrap_storage``), so the sync, async and
    worker paths are all counted."""

    def __init__(self, url: str | None = None, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self.calls: collections.Counter[str] = collections.Counter()
        #: (time.time(), process CPU seconds) when a storage was first asked for.
        self.started: tuple[float, float] | None = None
        #: (time.time(), ids applied, process CPU seconds) of every ack flush, in order.
        self.acks: list[tuple[float, int, float]] = []
        self.wrap_storage(self.counting)

    def counting(self, inner: Storage) -> Storage:
        """``inner`` counted; subclasses instrument it further (``bench/apps.py``)."""
        return CountingStorage(inner, self.calls, self._note_ack)

    async def storage(self) -> Storage:
        if self.started is None:
            self.started = (time.time(), time.process_time())
        return await super().storage()

    def _note_ack(self, applied: list[int]) -> None:
        self.acks.append((time.time(), len(applied), time.process_time()))


def bench_app(url: str | None) -> tuple[BenchApp, Task[Any, Any], dict[str, Any]]:
    """The app, its no-op task, and a dict where the task notes what it ran."""
    app = BenchApp(url)
    seen: dict[str, Any] = {"calls": 0, "started": {}}

    @app.task(name=TASK, queue=QUEUE, max_attempts=3)
    async def noop(i: int, sent: float = 0.0) -> None:
        seen["calls"] += 1
        if sent:
            seen["started"][i] = time.time()

    return app, noop, seen


@contextlib.contextmanager
def measured(app: BenchApp, jobs: int, out: dict[str, Any]) -> Iterator[None]:
    """Fill ``out`` with wall seconds, jobs/s, CPU µs/job and round trips/job."""
    calls_before = sum(app.calls.values())
    wall, cpu = time.perf_counter(), time.process_time()
    yield
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    calls = sum(app.calls.values()) - calls_before
    out.update(jobs=jobs, seconds=round(wall, 4), jobs_per_s=round(jobs / wall, 1),
               cpu_us_per_job=round(cpu * 1e6 / jobs, 2),
               round_trips_per_job=round(calls / jobs, 5))


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50/p95/p99 in milliseconds of samples in seconds."""
    if len(samples) < 2:
        value = samples[0] * 1e3 if samples else 0.0
        return {"p50_ms": value, "p95_ms": value, "p99_ms": value}
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {f"p{q}_ms": round(cuts[q - 1] * 1e3, 3) for q in (50, 95, 99)}


# -- workloads ---------------------------------------------------------------------------


def run_bulk(app: BenchApp, task: Task[Any, Any], total: int, batch: int) -> dict[str, Any]:
    """Workload 1: ``app.enqueue_many`` of ``batch`` jobs at a time, specs built inside."""
    out: dict[str, Any] = {"workload": "bulk", "batch": batch}
    app.count_jobs(queue=QUEUE)  # open the storage outside the measurement, writing nothing
    with measured(app, total, out):
        for start in range(0, total, batch):
            app.enqueue_many([task.job(i) for i in range(start, min(start + batch, total))])
    return out


def run_single(app: BenchApp, task: Task[Any, Any], total: int, threads: int) -> dict[str, Any]:
    """Workload 2: sync ``task.enqueue(i)``, one transaction each, from ``threads`` threads."""
    out: dict[str, Any] = {"workload": "single", "threads": threads}
    task.enqueue(-1)  # open the connection outside the measurement
    per_thread = total // threads
    latencies: list[list[float]] = [[] for _ in range(threads)]

    def work(mine: list[float]) -> None:
        clock, enqueue = time.perf_counter, task.enqueue
        for i in range(per_thread):
            began = clock()
            enqueue(i)
            mine.append(clock() - began)

    pool = [threading.Thread(target=work, args=(lat,)) for lat in latencies]
    with measured(app, per_thread * threads, out):
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
    out.update(percentiles([x for lat in latencies for x in lat]))
    return out


def run_burndown(app: BenchApp, task: Task[Any, Any], total: int, concurrency: int,
                 seen: dict[str, Any]) -> dict[str, Any]:
    """Burn-down in this process: ``total`` jobs pre-inserted, then a burst worker.

    Timed from the worker's start to its last acknowledgement.
    """
    run_bulk(app, task, total, 1000)
    seen["calls"] = 0
    out: dict[str, Any] = {"workload": "e2e", "concurrency": concurrency}
    config = WorkerConfig(queues={QUEUE: concurrency}, burst=True)
    app.acks.clear()
    with measured(app, total, out):
        began = time.time()
        asyncio.run(_work_then_close(app, config))
    acked = sum(n for _, n, _ in app.acks)
    if app.acks:  # the burst worker idles a little before it exits: not part of the run
        wall = app.acks[-1][0] - began
        out.update(seconds=round(wall, 4), jobs_per_s=round(total / wall, 1))
    counts = app.count_jobs(queue=QUEUE)
    out.update(acked=acked, handler_calls=seen["calls"], counts=counts,
               exactly_once=acked == total == seen["calls"] == counts["completed"])
    return out


async def _work_then_close(app: Conveyor, config: WorkerConfig) -> None:
    try:
        await app.run_worker(config=config)
    finally:
        await app.close_async()


def run_latency(app: BenchApp, task: Task[Any, Any], count: int, spacing: float,
                seen: dict[str, Any]) -> dict[str, Any]:
    """Workload 5 in one process: an idle worker, ``count`` enqueues ``spacing`` apart;
    enqueue-to-start time measured on this machine's clock."""
    ready, stop = threading.Event(), threading.Event()
    thread = threading.Thread(target=_idle_worker, args=(app, ready, stop), daemon=True)
    thread.start()
    ready.wait(30)
    task.enqueue(-1)  # warm the enqueue path
    time.sleep(0.2)
    seen["started"].clear()
    sent: dict[int, float] = {}
    for i in range(count):
        sent[i] = time.time()
        task.enqueue(i, sent=sent[i])
        time.sleep(spacing)
    deadline = time.monotonic() + 30
    while len(seen["started"]) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(60)
    started = seen["started"]
    out: dict[str, Any] = {"workload": "latency", "jobs": count, "spacing_s": spacing,
                           "started": len(started)}
    out.update(percentiles([started[i] - sent[i] for i in sent if i in started]))
    return out


def _idle_worker(app: Conveyor, ready: threading.Event, stop: threading.Event) -> None:
    async def main() -> None:
        stopping = asyncio.Event()
        runner = asyncio.create_task(app.run_worker(
            config=WorkerConfig(queues={QUEUE: 10}), stop=stopping, on_started=ready.set))
        while not stop.is_set() and not runner.done():
            await asyncio.sleep(0.02)
        stopping.set()
        await runner
        await app.close_async()

    asyncio.run(main())


# -- the command ---------------------------------------------------------------------------


def clean(url: str) -> int:
    """Delete this benchmark's rows (queue ``conveyor-bench``) and nothing else, through
    a plain app of its own (its round trips are not the benchmark's)."""
    app = Conveyor(url)

    async def delete() -> int:
        try:
            return await Operations(app, source="bench").delete_queue_jobs(QUEUE)
        finally:
            await app.close_async()

    return asyncio.run(delete())


def run_workload(url: str, workload: str, jobs: int, concurrency: int) -> dict[str, Any]:
    """One workload on a fresh app, between two clean-ups of the benchmark's rows."""
    app, task, seen = bench_app(url)
    try:
        app.count_jobs(queue=QUEUE)  # connect (and migrate SQLite) before cleaning
        clean(url)
        if workload == "bulk":
            return run_bulk(app, task, jobs, 1000)
        if workload == "single":
            return run_single(app, task, min(jobs, 2000), 1)
        if workload == "e2e":
            return run_burndown(app, task, jobs, concurrency, seen)
        return run_latency(app, task, min(jobs, 200), 0.01, seen)
    finally:
        app.close()
        clean(url)


COLUMNS = (("workload", "{}"), ("jobs", "{:,}"), ("jobs_per_s", "{:,.0f}"),
           ("p50_ms", "{:.2f}"), ("p99_ms", "{:.2f}"), ("cpu_us_per_job", "{:.1f}"),
           ("round_trips_per_job", "{:.3f}"))


def table(results: list[dict[str, Any]]) -> str:
    rows = [[name for name, _ in COLUMNS]]
    for result in results:
        rows.append([fmt.format(result[name]) if name in result else "-" for name, fmt in COLUMNS])
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True))
                     for row in rows)


@click.command("bench")
@click.option("--url", metavar="URL", help="Database URL. Default: $CONVEYOR_URL, else "
              "sqlite:///conveyor.db. Only rows of the 'conveyor-bench' queue are written "
              "or deleted.")
@click.option("--jobs", type=click.IntRange(100, 10_000_000), default=10_000, show_default=True,
              help="Jobs per workload (single enqueue uses at most 2,000, latency 200).")
@click.option("--concurrency", type=click.IntRange(min=1), default=100, show_default=True,
              help="Worker concurrency of the e2e burn-down.")
@click.option("--workload", type=click.Choice([*WORKLOADS, "all"]), default="all",
              show_default=True, help="bulk: enqueue_many of 1,000; single: one enqueue per "
              "call; e2e: burn-down by a worker in this process; latency: enqueue to start.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def bench(url: str | None, jobs: int, concurrency: int, workload: str, as_json: bool) -> None:
    """Measure enqueue, burn-down and latency on your database (queue 'conveyor-bench').

    Your own jobs are never touched: the benchmark writes only to the 'conveyor-bench'
    queue and deletes only that queue's rows, before and after each workload.
    """
    target = resolve_url(None, url)
    check_url(target)
    results = []
    for name in WORKLOADS if workload == "all" else (workload,):
        if not as_json:
            click.echo(f"running {name} ...", err=True)
        results.append(run_workload(target, name, jobs, concurrency))
    if as_json:
        json.dump(results, sys.stdout, indent=2)
        click.echo()
    else:
        click.echo(table(results))
