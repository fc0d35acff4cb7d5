"""Workloads 3, 6 and 7 (and 8's burn-down half): pre-inserted jobs drained by one
real ``conveyor worker --burst`` process, every job checked completed exactly once."""

from __future__ import annotations

from typing import Any

from conveyor.cli.bench import BenchApp

from ._targets import Target
from ._worker import WorkerProcess
from .apps import register

#: kind -> (task, queue)
KINDS = {"async": ("noop", "bench"), "sync": ("noop_sync", "bench-sync"),
         "retry": ("flaky", "bench-retry")}


def insert_jobs(target: Target, task_name: str, total: int) -> None:
    app = BenchApp(target.url)
    try:
        task = register(app)[task_name]
        for start in range(0, total, 5000):
            app.enqueue_many([task.job(i) for i in range(start, min(start + 5000, total))])
    finally:
        app.close()


def _expected(kind: str, total: int) -> tuple[dict[str, int], int]:
    """Outcomes per ``state/attempt`` and handler calls that mean "each exactly once"."""
    if kind != "retry":
        return {"completed/1": total}, total
    evens = (total + 1) // 2  # fail their first attempt, then succeed
    return {"completed/1": total - evens, "completed/2": evens}, total + evens


def burndown(target: Target, total: int, concurrency: int, kind: str = "async",
             backlog: int = 0, timeout: float = 1800) -> dict[str, Any]:
    """Drain ``total`` jobs with one worker process at ``concurrency``.

    jobs/s runs from the worker's start (its storage opening) to its last committed
    ack; ``_incl_startup`` figures run from the process launch.
    """
    task_name, queue = KINDS[kind]
    target.reset()
    if backlog:
        target.add_backlog(backlog)
    insert_jobs(target, task_name, total)
    worker = WorkerProcess(target, queue, concurrency, burst=True)
    try:
        run = worker.wait(timeout)
    finally:
        worker.close()
    rep = run.report
    outcomes = target.outcomes(queue, task_name)
    want_outcomes, want_calls = _expected(kind, total)
    handler_calls = rep.get("handler_calls", {}).get(task_name, 0)
    out: dict[str, Any] = {
        "workload": "burndown", "kind": kind, "jobs": total, "concurrency": concurrency,
        "backlog_rows": backlog, "worker_exit": run.returncode, "outcomes": outcomes,
        "handler_calls": handler_calls, "acked": rep.get("acked"),
        "exactly_once": outcomes == want_outcomes and handler_calls == want_calls,
        "peak_rss_mb": round(run.peak_rss_mb, 1), "worker_cpu_s_total": round(run.cpu_s, 3),
        "storage_calls": rep.get("storage_calls", {}),
    }
    if rep.get("started") and rep.get("last_ack"):
        (began, cpu0), (ended, cpu1) = rep["started"], rep["last_ack"]
        calls = sum(rep["storage_calls"].values())
        out.update(
            seconds=round(ended - began, 4), jobs_per_s=round(total / (ended - began), 1),
            jobs_per_s_incl_startup=round(total / (ended - run.launched), 1),
            cpu_us_per_job=round((cpu1 - cpu0) * 1e6 / total, 2),
            round_trips_per_job=round(calls / total, 5),
        )
    out["table"] = target.table_stats()
    return out
