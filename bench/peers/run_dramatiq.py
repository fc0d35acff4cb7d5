"""Dramatiq in its own venv: a ``dramatiq.Worker`` in the runner's process at its
defaults (8 worker threads, prefetch 2 x threads, the default middleware) on a
``RedisBroker``; the CLI's default would also start one such process per core."""

from __future__ import annotations

import importlib
import time
from typing import Any

from . import _runner

dramatiq: Any = importlib.import_module("dramatiq")
redis_broker: Any = importlib.import_module("dramatiq.brokers.redis")

QUEUE = "peers"
THREADS = 8
SETTINGS = {"worker": "dramatiq.Worker in the runner's process", "worker_threads": THREADS,
            "queue_prefetch": 2 * THREADS, "broker": "RedisBroker (defaults)",
            "middleware": "default", "max_retries": "20 (default)"}
TALLY = _runner.Tally()


def describe(config: dict[str, Any]) -> dict[str, Any]:
    return {"versions": _runner.versions("dramatiq", "redis"), "settings": SETTINGS}


def noop(i: int) -> None:
    TALLY.hit(i)


def _setup(config: dict[str, Any]) -> tuple[Any, Any]:
    broker = redis_broker.RedisBroker(url=config["redis_url"])
    dramatiq.set_broker(broker)
    return broker, dramatiq.actor(noop, actor_name="noop", queue_name=QUEUE)


def _stored(broker: Any) -> int:
    return int(broker.client.hlen(f"{broker.namespace}:{QUEUE}.msgs"))


def e2e(config: dict[str, Any]) -> dict[str, Any]:
    n = config["jobs"]
    broker, actor = _setup(config)
    for i in range(n):
        actor.send(i)
    began = time.time()
    worker = dramatiq.Worker(broker, worker_threads=THREADS)
    worker.start()
    done = _runner.wait_for_sync(lambda: TALLY.count() >= n, config.get("timeout", 600), 0.01)
    worker.join()  # every message of the run acked before the check
    worker.stop()
    left = _stored(broker)
    out = {**_runner.rate(n, TALLY.last_end - began), "left_in_broker": left,
           **_runner.exactly_once(TALLY.calls, range(n))}
    if not done or left:
        out.update(exactly_once=False, reason=f"{TALLY.count()} ran, {left} messages left")
    return out


def single(config: dict[str, Any]) -> dict[str, Any]:
    n = config["jobs"]
    broker, actor = _setup(config)
    actor.send(-1)  # connection warm
    began = time.perf_counter()
    for i in range(n):
        actor.send(i)
    out = _runner.rate(n, time.perf_counter() - began)
    return {**out, "api": "actor.send(i) (no async API)", **_runner.stored(_stored(broker) - 1, n)}


def latency(config: dict[str, Any]) -> dict[str, Any]:
    n, spacing = config["jobs"], config["spacing_s"]
    broker, actor = _setup(config)
    worker = dramatiq.Worker(broker, worker_threads=THREADS)
    worker.start()
    actor.send(-1)  # the worker is up once this one ran
    if not _runner.wait_for_sync(lambda: -1 in TALLY.calls, 30):
        raise RuntimeError("the worker did not run the warm-up job within 30 s")
    del TALLY.calls[-1]
    sent = _runner.spaced_sends_sync(n, spacing, actor.send)
    _runner.wait_for_sync(lambda: len(TALLY.calls) >= n, 30)
    worker.stop()
    return _runner.latency_result(sent, TALLY)


if __name__ == "__main__":
    raise SystemExit(_runner.main({"e2e": e2e, "single": single, "latency": latency}, describe))
