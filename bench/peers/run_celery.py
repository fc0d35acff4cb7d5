"""Celery in its own venv, Redis as the broker and no result backend (its default): a
worker embedded in the runner's process (``celery.contrib.testing.worker.start_worker``:
a thread, without heartbeat, mingle and gossip) with the threads pool at Celery's
default concurrency (the number of CPUs) and prefetch multiplier (4), acks on receipt
(its default, not acks_late). Celery has no bulk enqueue and no async API."""

from __future__ import annotations

import importlib
import os
import time
from typing import Any

from . import _runner

celery: Any = importlib.import_module("celery")
testing: Any = importlib.import_module("celery.contrib.testing.worker")

QUEUE = "celery"  # the default queue
CONCURRENCY = os.cpu_count() or 1
SETTINGS = {"worker": "start_worker (WorkController in a thread of the runner's process)",
            "pool": "threads", "concurrency": CONCURRENCY, "worker_prefetch_multiplier": 4,
            "acks_late": False, "result_backend": None,
            "without": "heartbeat, mingle, gossip (start_worker's defaults)"}
TALLY = _runner.Tally()


def describe(config: dict[str, Any]) -> dict[str, Any]:
    return {"versions": _runner.versions("celery", "kombu", "redis"), "settings": SETTINGS}


def _setup(config: dict[str, Any]) -> tuple[Any, Any]:
    app = celery.Celery("peers", broker=config["redis_url"])

    def noop(i: int) -> None:
        TALLY.hit(i)

    return app, app.task(name="noop")(noop)


def _worker(app: Any) -> Any:
    return testing.start_worker(app, pool="threads", concurrency=CONCURRENCY,
                                perform_ping_check=False, loglevel="WARNING")


def _left(app: Any) -> tuple[int, int]:
    with app.connection_for_write() as conn:
        client = conn.default_channel.client
        return int(client.llen(QUEUE)), int(client.hlen("unacked"))


def e2e(config: dict[str, Any]) -> dict[str, Any]:
    n = config["jobs"]
    app, task = _setup(config)
    for i in range(n):
        task.delay(i)
    began = time.time()
    with _worker(app):
        done = _runner.wait_for_sync(lambda: TALLY.count() >= n, 600, 0.01)
    queued, unacked = _left(app)
    out = {**_runner.rate(n, TALLY.last_end - began), "left_in_queue": queued,
           "unacked": unacked, **_runner.exactly_once(TALLY.calls, range(n))}
    if not done or queued or unacked:
        out.update(exactly_once=False,
                   reason=f"{TALLY.count()} ran, {queued} queued and {unacked} unacked left")
    return out


def single(config: dict[str, Any]) -> dict[str, Any]:
    n = config["jobs"]
    app, task = _setup(config)
    task.delay(-1)  # connection warm
    began = time.perf_counter()
    for i in range(n):
        task.delay(i)
    out = _runner.rate(n, time.perf_counter() - began)
    return {**out, "api": "task.delay(i) (no async API)", **_runner.stored(_left(app)[0] - 1, n)}


def latency(config: dict[str, Any]) -> dict[str, Any]:
    n, spacing = config["jobs"], config["spacing_s"]
    app, task = _setup(config)
    with _worker(app):
        task.delay(-1)  # the worker is up once this one ran
        if not _runner.wait_for_sync(lambda: -1 in TALLY.calls, 30):
            raise RuntimeError("the worker did not run the warm-up job within 30 s")
        del TALLY.calls[-1]
        sent = _runner.spaced_sends_sync(n, spacing, task.delay)
        _runner.wait_for_sync(lambda: len(TALLY.calls) >= n, 30)
    return _runner.latency_result(sent, TALLY)


if __name__ == "__main__":
    raise SystemExit(_runner.main({"e2e": e2e, "single": single, "latency": latency}, describe))
