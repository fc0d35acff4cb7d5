"""Workload 9 (PostgreSQL): several ``conveyor worker`` processes on one database.

* Burn-down: ``total`` pre-inserted jobs drained by ``processes`` workers in burst mode.
* Steady: the suite enqueues batches at a fixed rate while the workers wait for them, so
  every batch is a NOTIFY that reaches every process: the thundering-herd check.

Each worker connects with its own ``application_name``; a sampler thread reads
``pg_stat_activity`` every 50 ms (connections held per process, the peak) and the CPU of
those backends from ``/proc`` (database CPU per job, when the server runs on this
machine). Each worker reports its claims, the claims that came back empty and the
wake-ups it received (``bench/apps.py``).
"""

from __future__ import annotations

import collections
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from conveyor.cli.bench import BenchApp

from ._targets import Target
from ._worker import WorkerProcess, WorkerRun
from .apps import register
from .w_burndown import insert_jobs

APP_PREFIX = "conveyor-bench-w"
_TICKS = 100  # os.sysconf("SC_CLK_TCK") on Linux

_ACTIVITY_SQL = ("SELECT application_name, pid FROM pg_stat_activity"
                 " WHERE datname = current_database() AND application_name LIKE %s")


def process_cpu_s(pid: int) -> float | None:
    """utime + stime of a server process (None: not on this machine, or gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS


class ConnectionSampler:
    """Polls ``pg_stat_activity`` for the workers' connections until ``stop()``."""

    def __init__(self, url: str, interval: float = 0.05) -> None:
        self._url, self._interval = url, interval
        self._stopping = threading.Event()
        self.peak_total = 0
        self.peak_per_process: collections.Counter[str] = collections.Counter()
        self.samples = 0
        self._cpu: dict[int, float] = {}
        self._cpu_first: dict[int, float] = {}
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ConnectionSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._thread.join(10)

    def _run(self) -> None:
        with psycopg.connect(self._url, autocommit=True) as conn:
            while not self._stopping.is_set():
                rows = conn.execute(_ACTIVITY_SQL, [APP_PREFIX + "%"]).fetchall()
                per: collections.Counter[str] = collections.Counter(r[0] for r in rows)
                self.samples += 1
                self.peak_total = max(self.peak_total, len(rows))
                for name, n in per.items():
                    self.peak_per_process[name] = max(self.peak_per_process[name], n)
                for _, pid in rows:
                    cpu = process_cpu_s(pid)
                    if cpu is not None:
                        self._cpu_first.setdefault(pid, cpu)
                        self._cpu[pid] = cpu
                self._stopping.wait(self._interval)

    @property
    def backend_cpu_s(self) -> float | None:
        """CPU the workers' backends used while sampled (None: server not local)."""
        if not self._cpu:
            return None
        return sum(self._cpu.values()) - sum(self._cpu_first.values())

    def figures(self) -> dict[str, Any]:
        return {"connections_peak_total": self.peak_total,
                "connections_peak_per_process": max(self.peak_per_process.values(), default=0),
                "connection_samples": self.samples}


def named_url(url: str, name: str) -> str:
    """``url`` with ``application_name`` set (Conveyor takes URLs, not key=value DSNs)."""
    return f"{url}{'&' if '?' in url else '?'}application_name={name}"


def _start(target: Target, processes: int, concurrency: int,
           burst: bool) -> list[WorkerProcess]:
    return [WorkerProcess(target, "bench", concurrency, burst=burst,
                          url=named_url(target.url, f"{APP_PREFIX}{i}"))
            for i in range(processes)]


def collect(workers: list[WorkerProcess], timeout: float, stop: bool) -> list[WorkerRun]:
    if stop:
        for worker in workers:
            worker.stop()
    runs = []
    try:
        for worker in workers:
            runs.append(worker.wait(timeout))
    finally:
        for worker in workers:
            worker.close()
    return runs


def _worker_cpu_s(runs: list[WorkerRun]) -> float:
    """CPU of the workers from their storage opening to their last ack (startup and
    shutdown left out, as in workload 3); the whole process where a report lacks it."""
    total = 0.0
    for run in runs:
        rep = run.report
        if rep.get("started") and rep.get("last_ack"):
            total += rep["last_ack"][1] - rep["started"][1]
        else:
            total += run.cpu_s
    return total


def _summarize(target: Target, runs: list[WorkerRun], sampler: ConnectionSampler,
               total: int, processes: int) -> dict[str, Any]:
    """Figures common to both variants, from every worker's report."""
    reps = [r.report for r in runs]
    claims = sum(r.get("claims", 0) for r in reps)
    empty = sum(r.get("empty_claims", 0) for r in reps)
    wakes = sum(r.get("wakes", 0) for r in reps)
    handler_calls = sum(r.get("handler_calls", {}).get("noop", 0) for r in reps)
    outcomes = target.outcomes("bench", "noop")
    cpu = sampler.backend_cpu_s
    return {
        "processes": processes, "jobs": total, "outcomes": outcomes,
        "handler_calls": handler_calls,
        "exactly_once": outcomes == {"completed/1": total} and handler_calls == total,
        "worker_exit": max((abs(r.returncode) for r in runs), default=0),
        "jobs_per_process": [r.get("acked", 0) for r in reps],
        "claims_per_job": round(claims / total, 4),
        "empty_claims": empty, "empty_claims_per_job": round(empty / total, 4),
        "wakes_per_job_per_process": round(wakes / total / processes, 4),
        "worker_cpu_us_per_job": round(_worker_cpu_s(runs) * 1e6 / total, 2),
        "db_backend_cpu_us_per_job": None if cpu is None else round(cpu * 1e6 / total, 2),
        "round_trips_per_job": round(
            sum(sum(r.get("storage_calls", {}).values()) for r in reps) / total, 5),
        "peak_rss_mb": round(max(r.peak_rss_mb for r in runs), 1),
        **sampler.figures(),
    }


def burndown(target: Target, total: int, processes: int, concurrency: int,
             timeout: float = 1800) -> dict[str, Any]:
    """Drain ``total`` jobs with ``processes`` burst workers at ``concurrency`` each;
    jobs/s from the first worker's start to the last ack of any worker."""
    target.reset()
    insert_jobs(target, "noop", total)
    with ConnectionSampler(target.url) as sampler:
        runs = collect(_start(target, processes, concurrency, burst=True), timeout, False)
    out = {"workload": "workers_burndown", "concurrency": concurrency,
           **_summarize(target, runs, sampler, total, processes)}
    reps = [r.report for r in runs]
    starts = [r["started"][0] for r in reps if r.get("started")]
    ends = [r["last_ack"][0] for r in reps if r.get("last_ack")]
    if starts and ends:
        out["seconds"] = round(max(ends) - min(starts), 4)
        out["jobs_per_s"] = round(total / out["seconds"], 1)
        if out["db_backend_cpu_us_per_job"]:
            out["jobs_per_s_per_db_core"] = round(1e6 / out["db_backend_cpu_us_per_job"], 1)
    return out


def _wait_done(target: Target, total: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if target.outcomes("bench", "noop").get("completed/1", 0) >= total:
            return True
        time.sleep(0.05)
    return False


def _ready(target: Target, processes: int, timeout: float = 60) -> None:
    """Wait until every worker listens (its LISTEN connection is in pg_stat_activity)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = target.query("SELECT count(DISTINCT application_name) FROM pg_stat_activity"
                            " WHERE application_name LIKE %(p)s AND query LIKE 'LISTEN%%'",
                            {"p": APP_PREFIX + "%"})
        if rows[0][0] >= processes:
            return
        time.sleep(0.05)
    raise TimeoutError(f"{processes} workers did not start listening in {timeout}s")


def steady(target: Target, seconds: float, processes: int, concurrency: int,
           rate: float, batch: int) -> dict[str, Any]:
    """Enqueue ``batch`` jobs every ``batch / rate`` seconds for ``seconds`` while the
    workers wait; then wait for the last job, stop them and collect."""
    target.reset()
    app = BenchApp(target.url)
    task = register(app)["noop"]
    enqueued, batches = 0, 0
    try:
        with ConnectionSampler(target.url) as sampler:
            workers = _start(target, processes, concurrency, burst=False)
            try:
                _ready(target, processes)
                began = time.monotonic()
                while time.monotonic() - began < seconds:
                    app.enqueue_many([task.job(enqueued + i) for i in range(batch)])
                    enqueued, batches = enqueued + batch, batches + 1
                    pause = began + batches * batch / rate - time.monotonic()
                    if pause > 0:
                        time.sleep(pause)
                elapsed = time.monotonic() - began
                drained = _wait_done(target, enqueued, 120)
            finally:
                runs = collect(workers, 60, True)
    finally:
        app.close()
    out = {"workload": "workers_steady", "concurrency": concurrency, "seconds": seconds,
           "rate_target": rate, "batch": batch, "batches": batches, "drained": drained,
           "jobs_per_s": round(enqueued / elapsed, 1),
           **_summarize(target, runs, sampler, enqueued, processes)}
    out["wakes_per_batch_per_process"] = round(
        out["wakes_per_job_per_process"] * enqueued / batches, 3)
    return out
