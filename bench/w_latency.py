"""Workload 5: an idle worker, single enqueues ``spacing`` apart, enqueue-to-start time.

In-process: the worker runs on a thread of the enqueuing process (SQLite wakes it
through the in-process hub). Cross-process: a real ``conveyor worker`` process (SQLite
wakes it by polling ``PRAGMA data_version``; PostgreSQL by LISTEN/NOTIFY).
"""

from __future__ import annotations

import json
import time
from typing import Any

from conveyor.cli.bench import BenchApp, bench_app, percentiles, run_latency

from ._targets import Target
from ._worker import WorkerProcess
from .apps import register


def in_process(target: Target, count: int, spacing: float) -> dict[str, Any]:
    target.reset()
    app, task, seen = bench_app(target.url)
    try:
        out = run_latency(app, task, count, spacing, seen)
    finally:
        app.close()
    out.update(workload="latency", mode="in-process")
    return out


def _wait_completed(target: Target, count: int, timeout: float) -> int:
    deadline, done = time.monotonic() + timeout, 0
    while time.monotonic() < deadline:
        done = target.outcomes("bench-latency", "stamp").get("completed/1", 0)
        if done >= count:
            break
        time.sleep(0.05)
    return done


def cross_process(target: Target, count: int, spacing: float) -> dict[str, Any]:
    target.reset()
    app = BenchApp(target.url)
    stamp = register(app)["stamp"]
    worker = WorkerProcess(target, "bench-latency", 10, burst=False)
    try:
        stamp.enqueue(0.0)  # the worker is up once this one is done
        _wait_completed(target, 1, 60)
        time.sleep(0.3)
        for _ in range(count):
            stamp.enqueue(time.time())
            time.sleep(spacing)
        done = _wait_completed(target, count + 1, 60) - 1
    finally:
        worker.stop()
        try:
            run = worker.wait(60)
        finally:
            worker.close()
        app.close()
    rows = target.query("SELECT args, result FROM conveyor_jobs_all WHERE queue = 'bench-latency'"
                        " AND state = 'completed'")
    samples = []
    for args, result in rows:
        sent = (json.loads(args) if isinstance(args, str) else args)[0]
        started = json.loads(result) if isinstance(result, str) else result
        if sent:
            samples.append(started - sent)
    out: dict[str, Any] = {"workload": "latency", "mode": "cross-process", "jobs": count,
                           "spacing_s": spacing, "started": done,
                           "worker_exit": run.returncode}
    out.update(percentiles(samples))
    return out
