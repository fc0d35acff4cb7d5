"""Workload 4 (and 8's steady half): a producer keeps about ``ready`` jobs available
while one worker process drains them; throughput per 10-second window, the trend, and
the table's size and dead tuples at the end."""

from __future__ import annotations

import statistics
import time
from typing import Any

from conveyor.cli.bench import BenchApp

from ._targets import Target
from ._worker import WorkerProcess
from .apps import register


def _windows(per_second: list[list[int]], began: float, ended: float,
             window: int) -> list[float]:
    """jobs/s of each whole ``window``-second window between ``began`` and ``ended``."""
    counts = {second: n for second, n in per_second}
    first, out = int(began) + 1, []
    while first + window <= int(ended):
        out.append(sum(counts.get(s, 0) for s in range(first, first + window)) / window)
        first += window
    return out


def _trend(windows: list[float], window: int) -> dict[str, float]:
    """Least-squares slope (percent of the mean per minute), last third vs first third,
    and the worst window against the median one."""
    if len(windows) < 3:
        return {"slope_pct_per_min": 0.0, "last_vs_first_third": 1.0,
                "worst_window_vs_median": 1.0}
    xs = [i * window / 60 for i in range(len(windows))]
    slope = statistics.linear_regression(xs, windows).slope
    third = len(windows) // 3
    first, last = statistics.mean(windows[:third]), statistics.mean(windows[-third:])
    mean = statistics.mean(windows) or 1.0
    median = statistics.median(windows)
    return {"slope_pct_per_min": round(100 * slope / mean, 2),
            "last_vs_first_third": round(last / first, 3) if first else 0.0,
            # the saw-tooth issue 15 names: no window far below the run's median
            "worst_window_vs_median": round(min(windows) / median, 3) if median else 0.0}


def steady(target: Target, seconds: float, concurrency: int, ready: int = 5000,
           window: int = 10) -> dict[str, Any]:
    """Keep ``ready`` jobs available for ``seconds`` while a worker drains them;
    throughput per ``window`` seconds."""
    target.reset()
    app = BenchApp(target.url)
    task = register(app)["noop"]
    worker = WorkerProcess(target, "bench", concurrency, burst=False)
    enqueued, began = 0, time.time()
    try:
        while time.time() - began < seconds:
            deficit = ready - target.available("bench")
            if deficit > ready // 10:
                batch = min(deficit, 5000)
                app.enqueue_many([task.job(enqueued + i) for i in range(batch)])
                enqueued += batch
            else:
                time.sleep(0.01)
    finally:
        ended = time.time()
        worker.stop()
        try:
            run = worker.wait(120)
        finally:
            worker.close()
        app.close()
    rep = run.report
    windows = _windows(rep.get("acked_per_second", []), began, ended, window)
    calls = sum(rep.get("storage_calls", {}).values())
    acked = rep.get("acked") or 0
    return {
        "workload": "steady", "seconds": round(ended - began, 1), "concurrency": concurrency,
        "ready_target": ready, "enqueued": enqueued, "acked": acked,
        "jobs_per_s": round(statistics.median(windows), 1) if windows else 0.0,
        "window_s": window, "windows_jobs_per_s": [round(w) for w in windows],
        **_trend(windows, window),
        "round_trips_per_job": round(calls / acked, 5) if acked else None,
        "worker_cpu_us_per_job": round(run.cpu_s * 1e6 / acked, 2) if acked else None,
        "peak_rss_mb": round(run.peak_rss_mb, 1), "worker_exit": run.returncode,
        "table": target.table_stats(),
    }
