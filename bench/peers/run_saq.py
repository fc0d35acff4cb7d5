"""SAQ in its own venv: a ``saq.Worker`` on the runner's event loop at its defaults
(concurrency 10, dequeue_timeout 0, the Redis queue's blocking dequeue); SAQ has no
bulk enqueue, and its burst mode needs a non-default dequeue_timeout, so the e2e
drain stops the worker once every job ran."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import time
from typing import Any

from . import _runner

saq: Any = importlib.import_module("saq")

SETTINGS = {"worker": "saq.Worker on the runner's event loop", "concurrency": 10,
            "dequeue_timeout_s": 0.0, "queue": "Queue.from_url(redis://...) (defaults)"}
TALLY = _runner.Tally()


def describe(config: dict[str, Any]) -> dict[str, Any]:
    return {"versions": _runner.versions("saq", "redis"), "settings": SETTINGS}


async def noop(ctx: Any, *, i: int) -> None:
    TALLY.hit(i)


async def _start(queue: Any) -> tuple[Any, asyncio.Task[Any]]:
    worker = saq.Worker(queue, functions=[noop])
    return worker, asyncio.create_task(worker.start())


async def _stop(worker: Any, task: asyncio.Task[Any]) -> None:
    await worker.stop()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(task, 60)


async def e2e(config: dict[str, Any]) -> dict[str, Any]:
    n = config["jobs"]
    queue = saq.Queue.from_url(config["redis_url"])
    for i in range(n):
        await queue.enqueue("noop", i=i)
    began = time.time()
    worker, task = await _start(queue)
    done = await _runner.wait_for(lambda: TALLY.count() >= n, 600, 0.01)
    left = 0
    if done:  # the last jobs' completions written before the check
        deadline = time.monotonic() + 30
        while (left := await queue.count("incomplete")) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
    await _stop(worker, task)
    await queue.disconnect()
    out = {**_runner.rate(n, TALLY.last_end - began), "left_incomplete": left,
           **_runner.exactly_once(TALLY.calls, range(n))}
    if not done or left:
        out.update(exactly_once=False, reason=f"{TALLY.count()} ran, {left} left incomplete")
    return out


async def single(config: dict[str, Any]) -> dict[str, Any]:
    n = config["jobs"]
    queue = saq.Queue.from_url(config["redis_url"])
    await queue.enqueue("noop", i=-1)  # connection warm
    began = time.perf_counter()
    for i in range(n):
        await queue.enqueue("noop", i=i)
    out = _runner.rate(n, time.perf_counter() - began)
    stored = await queue.count("queued") - 1
    await queue.disconnect()
    return {**out, "api": "await queue.enqueue('noop', i=i)", **_runner.stored(stored, n)}


async def latency(config: dict[str, Any]) -> dict[str, Any]:
    n, spacing = config["jobs"], config["spacing_s"]
    queue = saq.Queue.from_url(config["redis_url"])
    worker, task = await _start(queue)
    await queue.enqueue("noop", i=-1)  # the worker is up once this one ran
    if not await _runner.wait_for(lambda: -1 in TALLY.calls, 30):
        raise RuntimeError("the worker did not run the warm-up job within 30 s")
    del TALLY.calls[-1]
    sent = await _runner.spaced_sends(n, spacing, lambda i: queue.enqueue("noop", i=i))
    await _runner.wait_for(lambda: len(TALLY.calls) >= n, 30)
    await _stop(worker, task)
    await queue.disconnect()
    return _runner.latency_result(sent, TALLY)


def _sync(fn: Any) -> _runner.Workload:
    return lambda config: asyncio.run(fn(config))


if __name__ == "__main__":
    raise SystemExit(_runner.main({"e2e": _sync(e2e), "single": _sync(single),
                                   "latency": _sync(latency)}, describe))
