"""RQ in its own venv: its default ``rq.Worker`` (a fork per job, the job run in the
child) on a ``Queue`` over redis-py; the e2e drain with ``work(burst=True)`` in the
runner's process, the latency run with the worker in a process of its own. Handlers
run in forked children, so they count through the tally file."""

from __future__ import annotations

import importlib
import multiprocessing
import os
import signal
import time
from typing import Any

from . import _runner

rq: Any = importlib.import_module("rq")
redis: Any = importlib.import_module("redis")

FUNC = "bench.peers.run_rq.noop"
SETTINGS = {"worker": "rq.Worker (default class: a fork per job)", "burst": "e2e only",
            "queue": "rq.Queue (defaults: result_ttl 500 s, job timeout 180 s)"}


def describe(config: dict[str, Any]) -> dict[str, Any]:
    return {"versions": _runner.versions("rq", "redis"), "settings": SETTINGS}


def noop(i: int) -> None:
    _runner.shared_tally().hit(i)


def _queue(config: dict[str, Any]) -> Any:
    return rq.Queue("peers", connection=redis.Redis.from_url(config["redis_url"]))


def _bulk(queue: Any, start: int, stop: int) -> None:
    queue.enqueue_many([rq.Queue.prepare_data(FUNC, (i,)) for i in range(start, stop)])


def e2e(config: dict[str, Any]) -> dict[str, Any]:
    n = config["jobs"]
    tally = _runner.file_tally(config["workdir"])
    queue = _queue(config)
    for start in range(0, n, 10_000):
        _bulk(queue, start, min(start + 10_000, n))
    began = time.time()
    rq.Worker([queue], connection=queue.connection).work(burst=True, logging_level="WARNING")
    exited = time.time()
    tally.load()
    left, failed = queue.count, queue.failed_job_registry.count
    out = {**_runner.rate(n, tally.last_end - began), "seconds_to_exit": round(exited - began, 4),
           "left_in_queue": left, "failed": failed, **_runner.exactly_once(tally.calls, range(n))}
    if left or failed:
        out.update(exactly_once=False, reason=f"{left} left in the queue, {failed} failed")
    return out


def single(config: dict[str, Any]) -> dict[str, Any]:
    n = config["jobs"]
    queue = _queue(config)
    queue.enqueue(FUNC, -1)  # connection warm
    began = time.perf_counter()
    for i in range(n):
        queue.enqueue(FUNC, i)
    out = _runner.rate(n, time.perf_counter() - began)
    return {**out, "api": "queue.enqueue(func, i) (no async API)",
            **_runner.stored(queue.count - 1, n)}


def bulk(config: dict[str, Any]) -> dict[str, Any]:
    n = config["jobs"]
    queue = _queue(config)
    queue.enqueue(FUNC, -1)
    began = time.perf_counter()
    _bulk(queue, 0, n)
    out = _runner.rate(n, time.perf_counter() - began)
    return {**out, "api": "queue.enqueue_many([Queue.prepare_data(...)]), one call",
            **_runner.stored(queue.count - 1, n)}


def _work(url: str) -> None:
    queue = rq.Queue("peers", connection=redis.Redis.from_url(url))
    rq.Worker([queue], connection=queue.connection).work(logging_level="WARNING")


def latency(config: dict[str, Any]) -> dict[str, Any]:
    n, spacing = config["jobs"], config["spacing_s"]
    tally = _runner.file_tally(config["workdir"])
    queue = _queue(config)
    worker = multiprocessing.get_context("fork").Process(target=_work,
                                                         args=(config["redis_url"],))
    worker.start()
    try:
        queue.enqueue(FUNC, -1)  # the worker is up once this one ran
        if not _runner.wait_for_sync(lambda: tally.count() >= 1, 30):
            raise RuntimeError("the worker did not run the warm-up job within 30 s")
        sent = _runner.spaced_sends_sync(n, spacing, lambda i: queue.enqueue(FUNC, i))
        _runner.wait_for_sync(lambda: tally.count() >= n + 1, 60, 0.02)
    finally:
        if worker.pid:
            os.kill(worker.pid, signal.SIGTERM)
        worker.join(30)
    tally.load()
    del tally.calls[-1]
    return _runner.latency_result(sent, tally)


if __name__ == "__main__":
    raise SystemExit(_runner.main({"e2e": e2e, "single": single, "bulk": bulk,
                                   "latency": latency}, describe))
