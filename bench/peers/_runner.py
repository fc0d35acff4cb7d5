"""What every runner shares (standard library only: it runs in the peers' venvs).

A runner is ``python -m bench.peers.run_<system> '<config JSON>'``; it runs one
workload once and prints one line ``PEER-RESULT {...}``. The config says the workload
(``e2e``, ``single``, ``bulk``, ``latency``), its size and where the services are.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from importlib import metadata
from typing import Any

MARK = "PEER-RESULT "
Workload = Callable[[dict[str, Any]], dict[str, Any]]


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50/p99 in milliseconds of samples in seconds (inclusive quantiles)."""
    if len(samples) < 2:
        value = samples[0] * 1e3 if samples else 0.0
        return {"p50_ms": value, "p99_ms": value}
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {"p50_ms": round(cuts[49] * 1e3, 3), "p99_ms": round(cuts[98] * 1e3, 3)}


def versions(*dists: str) -> dict[str, str]:
    """Installed versions of ``dists`` (``importlib.metadata``), those installed only."""
    found = {}
    for dist in dists:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[dist] = metadata.version(dist)
    return found


class Tally:
    """Handler calls by job argument, and when each call started and ended.

    ``path`` set: each call is also appended to that file as ``i start end`` (one
    ``write`` of an ``O_APPEND`` file: whole lines even from forked or other processes),
    for peers whose handlers do not run in the runner's process. Thread-safe: some
    peers run handlers on threads of their own.
    """

    def __init__(self, path: str | None = None) -> None:
        self.calls: Counter[int] = Counter()
        self.started: dict[int, float] = {}
        self.last_end = 0.0
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND) if path else None
        self._lock = threading.Lock()

    def hit(self, i: int, began: float | None = None) -> None:
        """One handler call for argument ``i`` (``began``: its start, time.time())."""
        now = time.time()
        began = now if began is None else began
        if self._fd is not None:
            os.write(self._fd, f"{i} {began!r} {now!r}\n".encode())
            return
        with self._lock:
            self.calls[i] += 1
            self.started.setdefault(i, began)
            self.last_end = max(self.last_end, now)

    def load(self) -> None:
        """Read back (anew) the calls other processes appended to ``path``."""
        if not self.path:
            return
        self.calls.clear()
        self.started.clear()
        self.last_end = 0.0
        with open(self.path, encoding="ascii") as f:
            for line in f:
                i, began, ended = line.split()
                self.calls[int(i)] += 1
                self.started.setdefault(int(i), float(began))
                self.last_end = max(self.last_end, float(ended))

    def count(self) -> int:
        """Calls so far (those in the file too, when other processes append to one)."""
        if self.path:
            with open(self.path, "rb") as f:
                return f.read().count(b"\n")
        return sum(self.calls.values())


#: The environment variable naming the tally file of handlers in other processes.
TALLY_ENV = "CONVEYOR_PEERS_TALLY"
_shared: Tally | None = None


def shared_tally() -> Tally:
    """The tally of this process's handlers when they run in processes the peer made
    (forked or spawned): appended to the file ``$CONVEYOR_PEERS_TALLY`` names."""
    global _shared
    if _shared is None or _shared.path != os.environ.get(TALLY_ENV):
        _shared = Tally(os.environ[TALLY_ENV])
    return _shared


def file_tally(workdir: str) -> Tally:
    """A tally read back from a file that handlers in other processes append to (the
    path exported for them through ``$CONVEYOR_PEERS_TALLY``)."""
    path = os.path.join(workdir, "tally.txt")
    open(path, "w").close()
    os.environ[TALLY_ENV] = path
    return Tally(path)


def exactly_once(calls: Counter[int], wanted: Iterable[int]) -> dict[str, Any]:
    """``exactly_once`` and, when it is false, what was missing or ran twice."""
    want = set(wanted)
    missing = sorted(want - set(calls))
    twice = sorted(i for i, n in calls.items() if n > 1)
    extra = sorted(set(calls) - want)
    out: dict[str, Any] = {"exactly_once": not (missing or twice or extra),
                           "handler_calls": sum(calls.values())}
    if not out["exactly_once"]:
        out.update(missing=len(missing), ran_more_than_once=len(twice), unexpected=len(extra),
                   examples=(missing or twice or extra)[:5])
    return out


def stored(count: int, wanted: int) -> dict[str, Any]:
    """The check of an enqueue run: the store holds exactly the jobs enqueued."""
    return {"exactly_once": count == wanted, "stored": count,
            **({} if count == wanted else {"reason": f"{count} jobs stored, {wanted} enqueued"})}


async def wait_for(predicate: Callable[[], bool], timeout: float, step: float = 0.005) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` passes (never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(step)
    return True


def wait_for_sync(predicate: Callable[[], bool], timeout: float, step: float = 0.005) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


async def spaced_sends(n: int, spacing: float,
                       send: Callable[[int], Awaitable[object]]) -> dict[int, float]:
    """The latency workload's sends: ``send(i)`` for i in 0..n-1, one at a time,
    ``spacing`` seconds apart; when each began (``time.time()``, the clock the
    handlers' start times are taken on)."""
    sent: dict[int, float] = {}
    for i in range(n):
        sent[i] = time.time()
        await send(i)
        await asyncio.sleep(spacing)
    return sent


def spaced_sends_sync(n: int, spacing: float, send: Callable[[int], object]) -> dict[int, float]:
    """``spaced_sends`` for a blocking client."""
    sent: dict[int, float] = {}
    for i in range(n):
        sent[i] = time.time()
        send(i)
        time.sleep(spacing)
    return sent


def rate(jobs: int, seconds: float) -> dict[str, Any]:
    return {"jobs": jobs, "seconds": round(seconds, 4),
            "jobs_per_s": round(jobs / seconds, 1) if seconds > 0 else 0.0}


def latency_result(sent: dict[int, float], tally: Tally) -> dict[str, Any]:
    """Enqueue-to-start of every job sent, and the exactly-once check of them."""
    samples = [tally.started[i] - t for i, t in sent.items() if i in tally.started]
    return {"jobs": len(sent), **percentiles(samples), **exactly_once(tally.calls, sent)}


def main(workloads: dict[str, Workload], describe: Callable[[dict[str, Any]], dict[str, Any]],
         argv: list[str] | None = None) -> int:
    """Run the workload the config names; print its result (or its error) as one line."""
    config = json.loads((argv or sys.argv)[1])
    out: dict[str, Any] = {"workload": config["workload"]}
    try:
        out.update(describe(config))
        out.update(workloads[config["workload"]](config))
        out["ok"] = bool(out.get("exactly_once"))
        if not out["ok"] and "reason" not in out:
            out["reason"] = "exactly-once check failed"
    except Exception as exc:  # reported, not raised: the driver records the failure
        traceback.print_exc()
        out.update(ok=False, reason=f"{type(exc).__name__}: {exc}"[:500])
    sys.stdout.flush()
    print(MARK + json.dumps(out), flush=True)
    return 0
