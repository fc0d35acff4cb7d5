"""procrastinate in its own venv: ``App.run_worker_async`` in process, at its documented
defaults (concurrency 1, LISTEN/NOTIFY with 5 s polling as the fallback, finished jobs
kept), through ``PsycopgConnector`` (a psycopg async pool); the e2e drain with
``wait=False``, which returns once the queue is caught up."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import time
from typing import Any

from . import _runner

procrastinate: Any = importlib.import_module("procrastinate")

SETTINGS = {"worker": "App.run_worker_async in the runner's process (asyncio)",
            "connector": "PsycopgConnector (psycopg_pool.AsyncConnectionPool, defaults)",
            "concurrency": 1, "listen_notify": True, "fetch_job_polling_interval_s": 5.0,
            "delete_jobs": "never (default)", "e2e_mode": "wait=False"}


def describe(config: dict[str, Any]) -> dict[str, Any]:
    return {"versions": _runner.versions("procrastinate", "psycopg", "psycopg-pool"),
            "settings": SETTINGS}


def _app(config: dict[str, Any], tally: _runner.Tally) -> tuple[Any, Any]:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=config["pg_url"]))

    async def noop(i: int) -> None:
        tally.hit(i)

    return app, app.task(name="noop", queue="peers")(noop)


async def _counts(app: Any) -> dict[str, int]:
    rows = await app.connector.execute_query_all_async(
        "SELECT status::text AS status, count(*) AS n FROM procrastinate_jobs"
        " WHERE task_name = 'noop' GROUP BY status")
    return {row["status"]: int(row["n"]) for row in rows}


async def e2e(config: dict[str, Any]) -> dict[str, Any]:
    n, tally = config["jobs"], _runner.Tally()
    app, noop = _app(config, tally)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        for start in range(0, n, 10_000):
            await noop.batch_defer_async(*({"i": i} for i in range(start, min(start + 10_000, n))))
        began = time.time()
        await app.run_worker_async(queues=["peers"], wait=False, install_signal_handlers=False)
        exited = time.time()
        counts = await _counts(app)
    out = {**_runner.rate(n, tally.last_end - began), "seconds_to_exit": round(exited - began, 4),
           "counts": counts, **_runner.exactly_once(tally.calls, range(n))}
    if counts != {"succeeded": n}:
        out.update(exactly_once=False, reason=f"{counts} after the drain, not {n} succeeded")
    return out


async def single(config: dict[str, Any]) -> dict[str, Any]:
    n = config["jobs"]
    app, noop = _app(config, _runner.Tally())
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        await noop.defer_async(i=-1)  # pool open, statements warm
        began = time.perf_counter()
        for i in range(n):
            await noop.defer_async(i=i)
        out = _runner.rate(n, time.perf_counter() - began)
        stored = sum((await _counts(app)).values()) - 1
    return {**out, "api": "await task.defer_async(i=i)", **_runner.stored(stored, n)}


async def bulk(config: dict[str, Any]) -> dict[str, Any]:
    n = config["jobs"]
    app, noop = _app(config, _runner.Tally())
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        await noop.defer_async(i=-1)
        began = time.perf_counter()
        await noop.batch_defer_async(*({"i": i} for i in range(n)))
        out = _runner.rate(n, time.perf_counter() - began)
        stored = sum((await _counts(app)).values()) - 1
    return {**out, "api": "await task.batch_defer_async(*kwargs), one call",
            **_runner.stored(stored, n)}


async def latency(config: dict[str, Any]) -> dict[str, Any]:
    n, spacing, tally = config["jobs"], config["spacing_s"], _runner.Tally()
    app, noop = _app(config, tally)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        worker = asyncio.create_task(app.run_worker_async(queues=["peers"],
                                                          install_signal_handlers=False))
        await noop.defer_async(i=-1)  # the worker is up once this one ran
        if not await _runner.wait_for(lambda: -1 in tally.calls, 30):
            raise RuntimeError("the worker did not run the warm-up job within 30 s")
        del tally.calls[-1]
        sent = await _runner.spaced_sends(n, spacing, lambda i: noop.defer_async(i=i))
        await _runner.wait_for(lambda: len(tally.calls) >= n, 30)
        worker.cancel()  # procrastinate's documented way to stop a worker task
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(worker, 60)
    return _runner.latency_result(sent, tally)


def _sync(fn: Any) -> _runner.Workload:
    return lambda config: asyncio.run(fn(config))


if __name__ == "__main__":
    raise SystemExit(_runner.main({"e2e": _sync(e2e), "single": _sync(single),
                                   "bulk": _sync(bulk), "latency": _sync(latency)}, describe))
