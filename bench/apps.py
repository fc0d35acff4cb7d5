"""The app the suite's ``conveyor worker`` processes run (``bench.apps:app``).

With ``$CONVEYOR_BENCH_REPORT`` set, the worker writes a JSON report there at exit:
storage calls (round trips), handler calls, when it started, every ack flush bucketed
per second, and its own peak RSS. The URL comes from ``$CONVEYOR_URL``.
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import resource
import threading
import time
from typing import Any

from conveyor import Conveyor, Task, current_job
from conveyor._storage import Storage
from conveyor.cli.bench import BenchApp

calls: collections.Counter[str] = collections.Counter()
_lock = threading.Lock()


async def noop(i: int) -> None:
    calls["noop"] += 1


def noop_sync(i: int) -> None:
    with _lock:
        calls["noop_sync"] += 1


async def flaky(i: int) -> None:
    """Even jobs fail their first attempt and are retried after 1 ms."""
    calls["flaky"] += 1
    if i % 2 == 0 and current_job().attempt == 1:
        raise RuntimeError("first attempt fails")


async def collect(i: int = 0, results: list[Any] | None = None) -> int:
    """A fan-in or batch callback (workload 9): returns how many results it was handed."""
    calls["collect"] += 1
    return len(results or [])


async def stamp(sent: float) -> float:
    """Returns when it started, so the suite can subtract when it was enqueued."""
    return time.time()


def register(target: Conveyor) -> dict[str, Task[Any, Any]]:
    """The suite's tasks on ``target``; the enqueuing side registers them too."""
    return {
        "noop": target.task(queue="bench")(noop),
        "noop_sync": target.task(queue="bench-sync")(noop_sync),
        "flaky": target.task(queue="bench-retry", max_attempts=3, backoff=0.001)(flaky),
        "stamp": target.task(queue="bench-latency")(stamp),
        "collect": target.task(queue="bench")(collect),
    }


class ReportingBenchApp(BenchApp):
    """A BenchApp that also counts claims that came back empty and the wake-ups
    (notifications) its worker received: the many-workers case's herd figures."""

    def __init__(self, url: str | None = None, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self.claims = 0
        self.empty_claims = 0
        self.wakes = 0

    def counting(self, inner: Storage) -> Storage:
        store = super().counting(inner)
        self._instrument(store)
        return store

    def _instrument(self, store: Any) -> None:
        fetch, subscribe = store.job_fetch_available, store.wake_subscribe

        async def counted_fetch(params: Any) -> Any:
            jobs = await fetch(params)
            self.claims += 1
            self.empty_claims += not jobs
            return jobs

        def counted_subscribe(callback: Any) -> Any:
            def counted_wake(queue: str) -> None:
                self.wakes += 1
                callback(queue)
            return subscribe(counted_wake)

        store.job_fetch_available = counted_fetch
        store.wake_subscribe = counted_subscribe


app = ReportingBenchApp()
register(app)


def report() -> dict[str, Any]:
    per_second: collections.Counter[int] = collections.Counter()
    for at, applied, _ in app.acks:
        per_second[int(at)] += applied
    last = app.acks[-1] if app.acks else None
    return {
        "pid": os.getpid(),
        "storage_calls": dict(app.calls),
        "handler_calls": dict(calls),
        "started": app.started,
        "acked": sum(n for _, n, _ in app.acks),
        "ack_flushes": len(app.acks),
        "last_ack": None if last is None else [last[0], last[2]],
        "acked_per_second": sorted(per_second.items()),
        "claims": app.claims,
        "empty_claims": app.empty_claims,
        "wakes": app.wakes,
        "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }


def _write_report() -> None:
    path = os.environ.get("CONVEYOR_BENCH_REPORT")
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(report(), f)


atexit.register(_write_report)
