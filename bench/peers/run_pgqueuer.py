"""pgqueuer in its own venv: ``QueueManager.run`` in process over one asyncpg connection,
at its defaults (batch_size 10, no concurrency cap, LISTEN/NOTIFY wake-ups, durable
tables); the e2e drain with ``mode=drain``, which exits once the queue is empty."""

from __future__ import annotations

import asyncio
import importlib
import time
from typing import Any

from . import _runner

asyncpg: Any = importlib.import_module("asyncpg")
pgqueuer: Any = importlib.import_module("pgqueuer")
types_: Any = importlib.import_module("pgqueuer.types")

SETTINGS = {"worker": "QueueManager.run in the runner's process (asyncio)",
            "driver": "AsyncpgDriver, one asyncpg connection each for worker and producer",
            "batch_size": 10, "max_concurrent_tasks": None, "dequeue_timeout_s": 30,
            "durability": "durable (default)", "e2e_mode": "drain"}


def describe(config: dict[str, Any]) -> dict[str, Any]:
    return {"versions": _runner.versions("pgqueuer", "asyncpg"), "settings": SETTINGS}


async def _queries(dsn: str) -> tuple[Any, Any]:
    conn = await asyncpg.connect(dsn)
    return conn, pgqueuer.Queries(pgqueuer.AsyncpgDriver(conn))


async def _install(dsn: str) -> None:
    conn, queries = await _queries(dsn)
    await queries.install()
    await conn.close()


def _payloads(start: int, stop: int) -> list[bytes | None]:
    return [str(i).encode() for i in range(start, stop)]


async def _enqueue_bulk(queries: Any, start: int, stop: int) -> None:
    n = stop - start
    await queries.enqueue(["noop"] * n, _payloads(start, stop), [0] * n)


def _manager(conn: Any, tally: _runner.Tally) -> Any:
    qm = pgqueuer.QueueManager(pgqueuer.Queries(pgqueuer.AsyncpgDriver(conn)))

    async def noop(job: Any) -> None:
        tally.hit(int(job.payload))

    qm.entrypoint("noop")(noop)
    return qm


async def _stored(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM pgqueuer WHERE entrypoint = 'noop'"))
    finally:
        await conn.close()


async def e2e(config: dict[str, Any]) -> dict[str, Any]:
    dsn, n = config["pg_url"], config["jobs"]
    await _install(dsn)
    conn, queries = await _queries(dsn)
    for start in range(0, n, 10_000):
        await _enqueue_bulk(queries, start, min(start + 10_000, n))
    await conn.close()
    tally = _runner.Tally()
    worker_conn = await asyncpg.connect(dsn)
    qm = _manager(worker_conn, tally)
    began = time.time()
    await qm.run(mode=types_.QueueExecutionMode.drain)
    exited = time.time()
    await worker_conn.close()
    left = await _stored(dsn)
    out = {**_runner.rate(n, tally.last_end - began), "seconds_to_exit": round(exited - began, 4),
           "left_in_queue": left, **_runner.exactly_once(tally.calls, range(n))}
    if left:
        out.update(exactly_once=False, reason=f"{left} jobs still in the queue table")
    return out


async def single(config: dict[str, Any]) -> dict[str, Any]:
    dsn, n = config["pg_url"], config["jobs"]
    await _install(dsn)
    conn, queries = await _queries(dsn)
    await queries.enqueue("warmup", b"-1")  # connection and statements warm
    began = time.perf_counter()
    for i in range(n):
        await queries.enqueue("noop", str(i).encode())
    out = _runner.rate(n, time.perf_counter() - began)
    await conn.close()
    return {**out, "api": "await Queries.enqueue(entrypoint, payload)",
            **_runner.stored(await _stored(dsn), n)}


async def bulk(config: dict[str, Any]) -> dict[str, Any]:
    dsn, n = config["pg_url"], config["jobs"]
    await _install(dsn)
    conn, queries = await _queries(dsn)
    await queries.enqueue("warmup", b"-1")
    began = time.perf_counter()
    await _enqueue_bulk(queries, 0, n)
    out = _runner.rate(n, time.perf_counter() - began)
    await conn.close()
    return {**out, "api": "await Queries.enqueue(lists of entrypoints, payloads, priorities),"
                          " one call", **_runner.stored(await _stored(dsn), n)}


async def latency(config: dict[str, Any]) -> dict[str, Any]:
    dsn, n, spacing = config["pg_url"], config["jobs"], config["spacing_s"]
    await _install(dsn)
    tally = _runner.Tally()
    worker_conn = await asyncpg.connect(dsn)
    qm = _manager(worker_conn, tally)
    worker = asyncio.create_task(qm.run())
    conn, queries = await _queries(dsn)
    await queries.enqueue("noop", b"-1")  # the worker is up once this one ran
    if not await _runner.wait_for(lambda: -1 in tally.calls, 30):
        raise RuntimeError("the worker did not run the warm-up job within 30 s")
    del tally.calls[-1]
    sent = await _runner.spaced_sends(n, spacing, lambda i: queries.enqueue("noop", str(i).encode()))
    await _runner.wait_for(lambda: len(tally.calls) >= n, 30)
    qm.shutdown.set()
    await asyncio.wait_for(worker, 60)
    await conn.close()
    await worker_conn.close()
    return _runner.latency_result(sent, tally)


def _sync(fn: Any) -> _runner.Workload:
    return lambda config: asyncio.run(fn(config))


if __name__ == "__main__":
    raise SystemExit(_runner.main({"e2e": _sync(e2e), "single": _sync(single),
                                   "bulk": _sync(bulk), "latency": _sync(latency)}, describe))
