"""Chancy in its own venv: a ``chancy.Worker`` on the runner's event loop, its queue
declared with its async executor at concurrency 100 and eager polling, defaults
otherwise (5 s polling with LISTEN/NOTIFY wake-ups, the default plugins).

Not its defaults, which cannot drain a backlog: the process executor at one job per
core, and a poll only every 5 s (a push's NOTIFY wakes it, a finished job does not),
ran 2 jobs per 5 s here. The async executor is the one Chancy documents for many
concurrent I/O-bound jobs, and the async no-op handler is one; concurrency 100 is
Conveyor's. Handlers are imported by name (a second copy of this module), so they
count through the tally file."""

from __future__ import annotations

import asyncio
import importlib
import time
from typing import Any

from . import _runner

chancy_api: Any = importlib.import_module("chancy")

FUNC = "bench.peers.run_chancy.noop"
QUEUE = "peers"
SETTINGS = {"worker": "chancy.Worker on the runner's event loop",
            "queue": "Queue('peers', executor=Chancy.Executor.Async, concurrency=100, "
                     "eager_polling=True), polling_interval 5 s (default)",
            "not_default": "executor (default: processes, one per core) and eager_polling: "
                           "the defaults ran 2 jobs per 5 s poll", "notifications": True,
            "plugins": "default", "push_many_batch_size": 1000}


def describe(config: dict[str, Any]) -> dict[str, Any]:
    return {"versions": _runner.versions("chancy", "psycopg", "psycopg-pool"),
            "settings": SETTINGS}


async def noop(i: int) -> None:
    _runner.shared_tally().hit(i)


def _job(i: int) -> Any:
    return chancy_api.Job(func=FUNC, queue=QUEUE, kwargs={"i": i})


async def _open(config: dict[str, Any]) -> Any:
    app = chancy_api.Chancy(config["pg_url"])
    await app.__aenter__()
    await app.migrate()
    await app.declare(chancy_api.Queue(QUEUE, executor=chancy_api.Chancy.Executor.Async,
                                       concurrency=100, eager_polling=True))
    return app


async def _push_many(app: Any, jobs: list[Any]) -> None:
    async for _ in app.push_many(jobs):
        pass


async def _states(app: Any) -> dict[str, int]:
    async with app.pool.connection() as conn, conn.cursor() as cur:
        await cur.execute("SELECT state, count(*) FROM chancy_jobs"  # the default prefix
                          " WHERE kwargs->>'i' <> '-1' GROUP BY state")
        return {str(state): int(n) for state, n in await cur.fetchall()}


async def e2e(config: dict[str, Any]) -> dict[str, Any]:
    n = config["jobs"]
    tally = _runner.file_tally(config["workdir"])
    app = await _open(config)
    await _push_many(app, [_job(i) for i in range(n)])
    began = time.time()
    worker = chancy_api.Worker(app, register_signal_handlers=False)
    await worker.start()
    done = await _runner.wait_for(lambda: tally.count() >= n, 600, 0.05)
    states: dict[str, int] = {}
    deadline = time.monotonic() + 30
    while done and time.monotonic() < deadline:  # the last completions written
        states = await _states(app)
        if states.get("succeeded") == n:
            break
        await asyncio.sleep(0.05)
    await worker.stop()
    await app.__aexit__(None, None, None)
    tally.load()
    out = {**_runner.rate(n, tally.last_end - began), "states": states,
           **_runner.exactly_once(tally.calls, range(n))}
    if states != {"succeeded": n}:
        out.update(exactly_once=False, reason=f"{states} after the drain, not {n} succeeded")
    return out


async def single(config: dict[str, Any]) -> dict[str, Any]:
    n = config["jobs"]
    app = await _open(config)
    await app.push(_job(-1))  # pool open, statements warm
    began = time.perf_counter()
    for i in range(n):
        await app.push(_job(i))
    out = _runner.rate(n, time.perf_counter() - began)
    stored = sum((await _states(app)).values())
    await app.__aexit__(None, None, None)
    return {**out, "api": "await chancy.push(Job(...))", **_runner.stored(stored, n)}


async def bulk(config: dict[str, Any]) -> dict[str, Any]:
    n = config["jobs"]
    app = await _open(config)
    await app.push(_job(-1))
    began = time.perf_counter()
    await _push_many(app, [_job(i) for i in range(n)])
    out = _runner.rate(n, time.perf_counter() - began)
    stored = sum((await _states(app)).values())
    await app.__aexit__(None, None, None)
    return {**out, "api": "chancy.push_many(jobs) (batches of 1,000, its default), one call",
            **_runner.stored(stored, n)}


async def latency(config: dict[str, Any]) -> dict[str, Any]:
    n, spacing = config["jobs"], config["spacing_s"]
    tally = _runner.file_tally(config["workdir"])
    app = await _open(config)
    worker = chancy_api.Worker(app, register_signal_handlers=False)
    await worker.start()
    await app.push(_job(-1))  # the worker (and its process pool) is up once this one ran
    if not await _runner.wait_for(lambda: tally.count() >= 1, 60, 0.02):
        raise RuntimeError("the worker did not run the warm-up job within 60 s")
    sent = await _runner.spaced_sends(n, spacing, lambda i: app.push(_job(i)))
    await _runner.wait_for(lambda: tally.count() >= n + 1, 60, 0.02)
    await worker.stop()
    await app.__aexit__(None, None, None)
    tally.load()
    del tally.calls[-1]
    return _runner.latency_result(sent, tally)


def _sync(fn: Any) -> _runner.Workload:
    return lambda config: asyncio.run(fn(config))


if __name__ == "__main__":
    raise SystemExit(_runner.main({"e2e": _sync(e2e), "single": _sync(single),
                                   "bulk": _sync(bulk), "latency": _sync(latency)}, describe))
