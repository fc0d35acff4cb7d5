"""Workload 10: workflows and batches, drained by one real ``conveyor worker --burst``.

* ``fan_in``: a fan-out of ``width`` jobs then one fan-in (a chord): enqueue time and
  burn-down jobs/s, the callback run once with every result.
* ``dag``: ``layers`` x ``width`` jobs, each waiting on two jobs of the layer before;
  its time per job against the same width in two layers (must not grow).
* ``batches``: ``count`` batches of ``size`` jobs, each with on_success and on_complete:
  burn-down jobs/s, every callback run exactly once.
* ``completion_cost``: what a completion with dependents costs. The same ``total`` jobs
  are drained four times: independent; each with one dependent; in fan-ins of
  ``small_fan_in``; in one fan-in of ``total``. The dependents and fan-in callbacks sit
  in a queue the worker does not serve, so only the completions are timed. The extra
  microseconds per completion must not grow with the fan-in's size.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from conveyor import JobSpec, Workflow, chord, group
from conveyor.cli.bench import BenchApp

from ._targets import Target
from ._worker import WorkerProcess
from .apps import register

QUEUE = "bench"
#: Dependents and callbacks that ``completion_cost`` leaves unrun (nobody serves it).
PARKED = "bench-parked"


def _parked(spec: JobSpec) -> JobSpec:
    return dataclasses.replace(spec, options=dataclasses.replace(spec.options, queue=PARKED))


def _enqueue(target: Target, build: Callable[[BenchApp, dict[str, Any]], None]) -> float:
    """Reset the database, run ``build(app, tasks)`` and return its seconds."""
    target.reset()
    app = BenchApp(target.url)
    try:
        tasks = register(app)
        began = time.perf_counter()
        build(app, tasks)
        return time.perf_counter() - began
    finally:
        app.close()


def _drain(target: Target, jobs: int, concurrency: int, timeout: float = 1800) -> dict[str, Any]:
    """Run one burst worker on ``bench`` until it is empty; ``jobs`` is what it must run.
    jobs/s runs from the worker's start (its storage opening) to its last committed ack."""
    worker = WorkerProcess(target, QUEUE, concurrency, burst=True)
    try:
        run = worker.wait(timeout)
    finally:
        worker.close()
    rep = run.report
    out: dict[str, Any] = {"jobs": jobs, "concurrency": concurrency,
                           "worker_exit": run.returncode, "acked": rep.get("acked"),
                           "handler_calls": rep.get("handler_calls", {}),
                           "peak_rss_mb": round(run.peak_rss_mb, 1)}
    if rep.get("started") and rep.get("last_ack"):
        (began, cpu0), (ended, cpu1) = rep["started"], rep["last_ack"]
        calls = sum(rep["storage_calls"].values())
        out.update(seconds=round(ended - began, 4), jobs_per_s=round(jobs / (ended - began), 1),
                   cpu_us_per_job=round((cpu1 - cpu0) * 1e6 / jobs, 2),
                   round_trips_per_job=round(calls / jobs, 5))
    return out


def _count(target: Target, where: str) -> int:
    return int(target.query(f"SELECT count(*) FROM conveyor_jobs_all WHERE {where}")[0][0])  # noqa: S608


def _callback_results(target: Target) -> list[int]:
    rows = target.query("SELECT result FROM conveyor_jobs_all WHERE task = 'collect' ORDER BY id")
    return [int(r[0]) for r in rows]


def fan_in(target: Target, width: int, concurrency: int) -> dict[str, Any]:
    """A fan-out of ``width`` then one fan-in."""

    def build(app: BenchApp, tasks: dict[str, Any]) -> None:
        app.enqueue_workflow(chord(group(*(tasks["noop"].job(i) for i in range(width))),
                                   tasks["collect"]))

    enqueue_s = _enqueue(target, build)
    out = _drain(target, width + 1, concurrency)
    calls = out.pop("handler_calls")
    once = (calls.get("noop") == width and calls.get("collect") == 1
            and _count(target, "state = 'completed' AND attempt = 1") == width + 1
            and _callback_results(target) == [width])
    return {"workload": "fan_in", "width": width, "enqueue_s": round(enqueue_s, 3),
            "enqueue_jobs_per_s": round((width + 1) / enqueue_s, 1), **out,
            "exactly_once": once}


def _dag_drain(target: Target, layers: int, width: int,
               concurrency: int) -> tuple[float, dict[str, Any], bool]:
    """Enqueue and drain ``layers`` x ``width`` jobs; job i of a layer waits on jobs i
    and i+1 of the layer before. (enqueue seconds, the drain, every job once)."""
    total = layers * width

    def build(app: BenchApp, tasks: dict[str, Any]) -> None:
        wf, before = Workflow(), list[Any]()  # what wf.add returned for the last layer
        for layer in range(layers):
            row = []
            for i in range(width):
                deps = [before[i], before[(i + 1) % width]] if before else []
                row.append(wf.add(tasks["noop"].job(layer * width + i), depends_on=deps))
            before = row
        app.enqueue_workflow(wf)

    enqueue_s = _enqueue(target, build)
    out = _drain(target, total, concurrency)
    once = (out.pop("handler_calls").get("noop") == total
            and _count(target, "state = 'completed' AND attempt = 1") == total)
    return enqueue_s, out, once


def dag(target: Target, layers: int, width: int, concurrency: int) -> dict[str, Any]:
    """The layered DAG, and the same width in 2 layers: the time per job of the big one
    over the small one's must stay small (a completion's cost must not grow with the
    number of jobs still waiting). Near 1.4 is expected: 90% of the big DAG's jobs have
    dependents, half of the small one's, and a completion with dependents costs more."""
    _, small, small_once = _dag_drain(target, 2, width, concurrency)
    enqueue_s, out, once = _dag_drain(target, layers, width, concurrency)
    per_job = out.get("seconds", 0.0) / (layers * width)
    per_job_small = small.get("seconds", 0.0) / (2 * width) or 1.0
    return {"workload": "dag", "layers": layers, "width": width, "edges": 2 * (layers - 1) * width,
            "enqueue_s": round(enqueue_s, 3),
            "enqueue_jobs_per_s": round(layers * width / enqueue_s, 1), **out,
            "jobs_per_s_two_layers": small.get("jobs_per_s"),
            "per_job_vs_two_layers": round(per_job / per_job_small, 3),
            "exactly_once": once and small_once}


def batches(target: Target, count: int, size: int, concurrency: int) -> dict[str, Any]:
    """``count`` batches of ``size`` jobs, each with on_success and on_complete."""

    def build(app: BenchApp, tasks: dict[str, Any]) -> None:
        noop, collect = tasks["noop"], tasks["collect"]
        for b in range(count):
            app.batch([noop.job(b * size + i) for i in range(size)],
                      on_success=collect.job(2 * b), on_complete=collect.job(2 * b + 1))

    enqueue_s = _enqueue(target, build)
    total = count * size
    out = _drain(target, total + 2 * count, concurrency)
    calls = out.pop("handler_calls")
    finished = int(target.query(
        "SELECT count(*) FROM conveyor_batches WHERE finished_at IS NOT NULL")[0][0])
    once = (calls.get("noop") == total and calls.get("collect") == 2 * count
            and finished == count
            and _count(target, "state = 'completed' AND attempt = 1") == total + 2 * count)
    return {"workload": "batches", "batches": count, "size": size,
            "enqueue_s": round(enqueue_s, 3), "enqueue_jobs_per_s": round(total / enqueue_s, 1),
            **out, "callbacks": 2 * count, "callback_runs": calls.get("collect", 0),
            "batches_finished": finished, "exactly_once": once}


def _shape(kind: str, total: int, small_fan_in: int) -> Callable[[BenchApp, dict[str, Any]], None]:
    """What ``completion_cost`` drains: ``total`` noop jobs, and their parked followers."""

    def build(app: BenchApp, tasks: dict[str, Any]) -> None:
        noop, collect = tasks["noop"], tasks["collect"]
        if kind == "independent":
            for start in range(0, total, 5000):
                app.enqueue_many([noop.job(i) for i in range(start, min(start + 5000, total))])
            return
        if kind == "one_dependent":
            wf = Workflow()
            for i in range(total):
                wf.add(_parked(noop.job(-i)), depends_on=[wf.add(noop.job(i))])
            app.enqueue_workflow(wf)
            return
        width = small_fan_in if kind == "fan_in_small" else total
        for start in range(0, total, width):
            header = group(*(noop.job(i) for i in range(start, min(start + width, total))))
            app.enqueue_workflow(chord(header, _parked(collect.job())))

    return build


def completion_cost(target: Target, total: int, small_fan_in: int,
                    concurrency: int) -> dict[str, Any]:
    """The same ``total`` completions with no dependent, one each, and in fan-ins of two
    sizes; the extra µs per completion over the independent drain."""
    runs: dict[str, dict[str, Any]] = {}
    for kind in ("independent", "one_dependent", "fan_in_small", "fan_in_large"):
        _enqueue(target, _shape(kind, total, small_fan_in))
        runs[kind] = _drain(target, total, concurrency)
        released = _count(target, f"queue = '{PARKED}' AND state = 'available'")
        runs[kind]["released"] = released
        runs[kind]["ok"] = (runs[kind].pop("handler_calls").get("noop") == total
                            and released == {"independent": 0, "one_dependent": total,
                                             "fan_in_small": -(-total // small_fan_in),
                                             "fan_in_large": 1}[kind])
    base = runs["independent"].get("seconds", 0.0)
    out: dict[str, Any] = {"workload": "completion_cost", "jobs": total,
                           "small_fan_in": small_fan_in, "concurrency": concurrency,
                           "jobs_per_s": runs["independent"].get("jobs_per_s"),
                           "exactly_once": all(r["ok"] for r in runs.values())}
    for kind, run in runs.items():
        out[f"jobs_per_s_{kind}"] = run.get("jobs_per_s")
        out[f"cpu_us_per_job_{kind}"] = run.get("cpu_us_per_job")
        if kind != "independent":
            out[f"extra_us_per_completion_{kind}"] = round(
                (run.get("seconds", 0.0) - base) * 1e6 / total, 1)
    out["ack_cost_us"] = out["extra_us_per_completion_one_dependent"]
    small = runs["fan_in_small"].get("seconds") or 1.0
    out["fan_in_large_vs_small"] = round(runs["fan_in_large"].get("seconds", 0.0) / small, 3)
    return out
