"""Conveyor through its public async API, in the repository's venv (the tree on
PYTHONPATH): ``enqueue_async``, ``enqueue_many_async`` and ``run_worker`` at
concurrency 100 in the runner's process, on SQLite (a new file each run) or PostgreSQL
(the scratch database the driver made), measured exactly as the peers are. The worker's
code is imported with this module, as every peer's runner imports its worker's: an app
that only enqueues loads it on its first ``run_worker``, which the e2e drain would
otherwise time (7 ms here, after the enqueue and migration loaded the rest)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from conveyor import Conveyor, Task, WorkerConfig, __version__
from conveyor._runtime import worker as _worker_code  # noqa: F401

from . import _runner

QUEUE = "peers"
CONCURRENCY = 100


def describe(config: dict[str, Any]) -> dict[str, Any]:
    return {"versions": {"conveyor": __version__, **_runner.versions("psycopg", "psycopg-binary")},
            "settings": {"worker": "app.run_worker in the runner's process (asyncio)",
                         "backend": config["backend"], "concurrency": CONCURRENCY,
                         "fetch_limit": WorkerConfig().fetch_limit, "e2e_mode": "burst"}}


def _app(config: dict[str, Any], tally: _runner.Tally) -> tuple[Conveyor, Task[Any, Any]]:
    if config["backend"] == "sqlite":
        path = os.path.join(config["workdir"], "conveyor-peers.db")
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.remove(path + suffix)
        url = f"sqlite:///{path}"
    else:
        url = config["pg_url"]
    app = Conveyor(url)

    @app.task(name="noop", queue=QUEUE)
    async def noop(i: int) -> None:
        tally.hit(i)

    return app, noop


async def _stored(app: Conveyor) -> int:
    return sum((await app.count_jobs_async(queue=QUEUE)).values())


async def e2e(config: dict[str, Any]) -> dict[str, Any]:
    n, tally = config["jobs"], _runner.Tally()
    app, noop = _app(config, tally)
    await app.migrate_async()
    await app.enqueue_many_async([noop.job(i) for i in range(n)])
    began = time.time()
    await app.run_worker(config=WorkerConfig(queues={QUEUE: CONCURRENCY}, burst=True))
    exited = time.time()
    counts = await app.count_jobs_async(queue=QUEUE)
    await app.close_async()
    out = {**_runner.rate(n, tally.last_end - began), "seconds_to_exit": round(exited - began, 4),
           "counts": counts, **_runner.exactly_once(tally.calls, range(n))}
    if counts.get("completed") != n:
        out.update(exactly_once=False, reason=f"{counts} after the drain, not {n} completed")
    return out


async def single(config: dict[str, Any]) -> dict[str, Any]:
    n = config["jobs"]
    app, noop = _app(config, _runner.Tally())
    await app.migrate_async()
    await app.enqueue_many_async([noop.job(-1)])  # storage open, statements warm
    began = time.perf_counter()
    for i in range(n):
        await noop.enqueue_async(i)
    out = _runner.rate(n, time.perf_counter() - began)
    stored = await _stored(app) - 1
    await app.close_async()
    return {**out, "api": "await task.enqueue_async(i)", **_runner.stored(stored, n)}


async def bulk(config: dict[str, Any]) -> dict[str, Any]:
    n = config["jobs"]
    app, noop = _app(config, _runner.Tally())
    await app.migrate_async()
    await app.enqueue_many_async([noop.job(-1)])
    began = time.perf_counter()
    await app.enqueue_many_async([noop.job(i) for i in range(n)])
    out = _runner.rate(n, time.perf_counter() - began)
    stored = await _stored(app) - 1
    await app.close_async()
    return {**out, "api": "await app.enqueue_many_async(specs), one call"
                          " (10,000 per round trip)", **_runner.stored(stored, n)}


async def latency(config: dict[str, Any]) -> dict[str, Any]:
    n, spacing, tally = config["jobs"], config["spacing_s"], _runner.Tally()
    app, noop = _app(config, tally)
    await app.migrate_async()
    stop = asyncio.Event()
    worker = asyncio.create_task(app.run_worker(
        config=WorkerConfig(queues={QUEUE: CONCURRENCY}), stop=stop))
    await noop.enqueue_async(-1)  # the worker is up once this one ran
    if not await _runner.wait_for(lambda: -1 in tally.calls, 30):
        raise RuntimeError("the worker did not run the warm-up job within 30 s")
    del tally.calls[-1]
    sent = await _runner.spaced_sends(n, spacing, noop.enqueue_async)
    await _runner.wait_for(lambda: len(tally.calls) >= n, 30)
    stop.set()
    await asyncio.wait_for(worker, 60)
    await app.close_async()
    return _runner.latency_result(sent, tally)


def _sync(fn: Any) -> _runner.Workload:
    return lambda config: asyncio.run(fn(config))


if __name__ == "__main__":
    raise SystemExit(_runner.main({"e2e": _sync(e2e), "single": _sync(single),
                                   "bulk": _sync(bulk), "latency": _sync(latency)}, describe))
