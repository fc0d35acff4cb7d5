"""Huey in its own venv, on Redis (``RedisHuey``) or SQLite (``SqliteHuey``): its
consumer started in the runner's process at its defaults (1 worker, a thread; queue
polling from 0.1 s backing off by 1.15x to at most 10 s; on Redis a blocking pop)."""

from __future__ import annotations

import importlib
import os
import time
from typing import Any

from . import _runner

huey_api: Any = importlib.import_module("huey")

SETTINGS = {"consumer": "Huey consumer in the runner's process (Consumer.start)",
            "workers": 1, "worker_type": "thread", "initial_delay_s": 0.1, "backoff": 1.15,
            "max_delay_s": 10.0, "results": "stored (default)"}
TALLY = _runner.Tally()


def describe(config: dict[str, Any]) -> dict[str, Any]:
    storage = {"redis": "RedisHuey (blocking pop, default)",
               "sqlite": "SqliteHuey (WAL, its default; fsync off, its default)"}
    return {"versions": _runner.versions("huey", "redis"),
            "settings": {**SETTINGS, "storage": storage[config["storage"]]}}


def _setup(config: dict[str, Any]) -> tuple[Any, Any]:
    if config["storage"] == "redis":
        huey = huey_api.RedisHuey("peers", url=config["redis_url"])
    else:
        huey = huey_api.SqliteHuey("peers", filename=os.path.join(config["workdir"], "huey.db"))

    def noop(i: int) -> None:
        TALLY.hit(i)

    return huey, huey.task(name="noop")(noop)


def _consumer(huey: Any) -> Any:
    consumer = huey.create_consumer()
    consumer.start()
    return consumer


def e2e(config: dict[str, Any]) -> dict[str, Any]:
    n = config["jobs"]
    huey, task = _setup(config)
    for i in range(n):
        task(i)
    began = time.time()
    consumer = _consumer(huey)
    done = _runner.wait_for_sync(lambda: TALLY.count() >= n, 600, 0.01)
    consumer.stop(graceful=True)
    left = huey.pending_count()
    out = {**_runner.rate(n, TALLY.last_end - began), "left_in_queue": left,
           **_runner.exactly_once(TALLY.calls, range(n))}
    if not done or left:
        out.update(exactly_once=False, reason=f"{TALLY.count()} ran, {left} left in the queue")
    return out


def single(config: dict[str, Any]) -> dict[str, Any]:
    n = config["jobs"]
    huey, task = _setup(config)
    task(-1)  # storage open
    began = time.perf_counter()
    for i in range(n):
        task(i)
    out = _runner.rate(n, time.perf_counter() - began)
    return {**out, "api": "task(i) (no async API)",
            **_runner.stored(huey.pending_count() - 1, n)}


def latency(config: dict[str, Any]) -> dict[str, Any]:
    n, spacing = config["jobs"], config["spacing_s"]
    huey, task = _setup(config)
    consumer = _consumer(huey)
    task(-1)  # the consumer is up once this one ran
    if not _runner.wait_for_sync(lambda: -1 in TALLY.calls, 30):
        raise RuntimeError("the consumer did not run the warm-up job within 30 s")
    del TALLY.calls[-1]
    sent = _runner.spaced_sends_sync(n, spacing, task)
    _runner.wait_for_sync(lambda: len(TALLY.calls) >= n, 30)
    consumer.stop(graceful=True)
    return _runner.latency_result(sent, TALLY)


if __name__ == "__main__":
    raise SystemExit(_runner.main({"e2e": e2e, "single": single, "latency": latency}, describe))
