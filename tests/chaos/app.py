"""Tasks run by real ``conveyor worker`` processes in the chaos scenarios.

Every execution writes to a ledger file outside the queue (``$CONVEYOR_CHAOS_LEDGER``),
one line per event: ``<event> <job id> <attempt> <pid> <monotonic ns>``, where event is

* ``start``: the handler began;
* ``end``: it returned (the worker will try to record ``completed``);
* ``fail``: it raised (the worker will record a failed attempt);
* ``abort``: it was interrupted (cancel, shutdown, lost lease) or saw ``cancelled``;
* ``snooze``: it gave the attempt back with ``Snooze``.

Lines are short single ``write`` calls on an ``O_APPEND`` descriptor, so lines of
concurrent processes never interleave. Times are ``CLOCK_MONOTONIC``, one clock for
every process of the machine and untouched by the clock-skew scenario.

Per-process behaviour is steered by the environment the harness gives each worker:
``CONVEYOR_CHAOS_HOLD=<seconds>`` makes ``work``/``work_sync`` run that long instead
(scenario 2), ``CONVEYOR_CHAOS_POOL`` sets the PostgreSQL pool size (scenario 7).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

from conveyor import Conveyor, ConveyorConfig, Snooze, current_job

app = Conveyor(config=ConveyorConfig(pool_max_size=int(os.environ.get("CONVEYOR_CHAOS_POOL", "10"))))

_fd: int | None = None


def ledger(event: str) -> None:
    """Append one event for the running job."""
    global _fd
    if _fd is None:
        _fd = os.open(os.environ["CONVEYOR_CHAOS_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    job = current_job()
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    os.write(_fd, f"{event} {job.id} {job.attempt} {os.getpid()} {now}\n".encode())


def _hold(seconds: float) -> float:
    held = os.environ.get("CONVEYOR_CHAOS_HOLD")
    return float(held) if held else seconds


# -- ordinary work ---------------------------------------------------------------------------


@app.task(max_attempts=25, backoff=0.05)
async def work(seconds: float) -> int:
    """Sleep (async); returns the pid that completed it."""
    ledger("start")
    try:
        await asyncio.sleep(_hold(seconds))
    except asyncio.CancelledError:
        ledger("abort")
        raise
    ledger("end")
    return os.getpid()


@app.task(max_attempts=25, backoff=0.05)
def work_sync(seconds: float) -> int:
    """Sleep in a worker thread, stopping early once asked to (as the docs tell)."""
    ledger("start")
    deadline = time.monotonic() + _hold(seconds)
    job = current_job()
    while time.monotonic() < deadline:
        if job.cancelled:
            ledger("abort")
            return -1  # the worker records cancelled / gives back / drops it
        time.sleep(min(0.01, max(deadline - time.monotonic(), 0)))
    ledger("end")
    return os.getpid()


@app.task(max_attempts=25, backoff=0.05)
def stubborn(seconds: float) -> int:
    """Like ``work_sync``, but notes the stop in the ledger and keeps running anyway:
    a handler that ignores ``current_job().cancelled``."""
    ledger("start")
    deadline = time.monotonic() + _hold(seconds)
    job, noted = current_job(), False
    while time.monotonic() < deadline:
        if job.cancelled and not noted:
            ledger("abort")
            noted = True
        time.sleep(min(0.01, max(deadline - time.monotonic(), 0)))
    ledger("end")
    return os.getpid()


@app.task(max_attempts=25, backoff=0.2)
async def flaky(fail_times: int) -> int:
    """Fails its first ``fail_times`` attempts, then completes."""
    ledger("start")
    if current_job().attempt <= fail_times:
        ledger("fail")
        raise RuntimeError(f"planned failure on attempt {current_job().attempt}")
    ledger("end")
    return os.getpid()


@app.task(max_attempts=25)
async def snooze_once(seconds: float) -> int:
    """Snoozes for ``seconds`` the first time it runs, then completes."""
    ledger("start")
    marker = Path(os.environ["CONVEYOR_CHAOS_LEDGER"]).with_name(f"snoozed-{current_job().id}")
    if not marker.exists():
        marker.touch()
        ledger("snooze")
        raise Snooze(seconds)
    ledger("end")
    return os.getpid()


# -- faults ----------------------------------------------------------------------------------


@app.task(max_attempts=3)
def suicide(how: str) -> None:
    """Kills its own process every time: ``exit`` (os._exit) or ``kill`` (SIGKILL)."""
    ledger("start")
    if how == "exit":
        os._exit(17)
    os.kill(os.getpid(), signal.SIGKILL)


@app.task(max_attempts=3)
async def hog(seconds: float) -> int:
    """Holds one of the worker's own database connections for ``seconds``.

    On PostgreSQL it borrows a pooled connection of the app the worker runs on and
    sleeps in a statement (a slow query); on SQLite, whose storage has one dedicated
    thread, it floods that thread with reads for the same time.
    """
    ledger("start")
    storage: Any = await app.storage()
    if storage.capabilities.dialect == "postgres":
        async with storage._conn() as conn:
            await conn.execute("SELECT pg_sleep(%s)", [seconds])
    else:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            await app.count_jobs_async()
    ledger("end")
    return os.getpid()


@app.task(max_attempts=3)
def cpu(seconds: float) -> int:
    """A pure-Python CPU loop in a worker thread (the interpreter switches threads
    every 5 ms, so the event loop's heartbeats keep running)."""
    ledger("start")
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        n += 1
    ledger("end")
    return os.getpid()


@app.task(max_attempts=3)
async def cpu_async(seconds: float) -> int:
    """The same loop inside an async handler: it blocks the event loop itself (on the
    first attempt only, so that a rescued re-run finishes)."""
    ledger("start")
    deadline = time.monotonic() + (seconds if current_job().attempt == 1 else 0.01)
    n = 0
    while time.monotonic() < deadline:
        n += 1
    ledger("end")
    return os.getpid()


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("this exception cannot be printed")


@app.task(max_attempts=2, backoff=0.05)
async def bad_error(kind: str) -> None:
    """Raises an error that is hard to store: huge, NUL, lone surrogate, unprintable."""
    ledger("start")
    ledger("fail")
    if kind == "huge":
        raise ValueError("x" * 5_000_000)
    if kind == "deep":
        def recurse(n: int) -> None:
            if n == 0:
                raise RecursionError("bottom of a deep stack")
            recurse(n - 1)
        recurse(400)
    if kind == "nul":
        raise ValueError("nul \x00 byte")
    if kind == "surrogate":
        raise ValueError("lone \ud800 surrogate")
    raise _Unprintable()


@app.task(max_attempts=2, backoff=0.05)
async def bad_result(kind: str) -> Any:
    """Returns a result that is hard to store."""
    ledger("start")
    ledger("end")
    if kind == "nul":
        return {"text": "nul \x00 byte", "k\x00": 1}
    if kind == "surrogate":
        return ["lone \ud800 surrogate"]
    if kind == "huge":
        return "y" * 5_000_000
    return None


@app.task(max_attempts=2, backoff=0.05)
async def echo(*args: Any, **kwargs: Any) -> int:
    """Accepts anything; returns how many arguments it got."""
    ledger("start")
    ledger("end")
    return len(args) + len(kwargs)


# -- workflows and batches (scenarios 15-17) -----------------------------------------------


@app.task(max_attempts=25, backoff=0.05)
async def gather(results: list[Any] | None = None, tag: str = "") -> int:
    """A fan-in or batch callback: returns how many results it was handed."""
    ledger("start")
    ledger("end")
    return len(results or [])


@app.task(max_attempts=25, backoff=0.05)
def at_barrier(barrier: str) -> int:
    """Waits until the file ``barrier`` exists (polling every millisecond), then returns:
    jobs waiting on one barrier finish within a millisecond or so of each other."""
    ledger("start")
    path, job = Path(barrier), current_job()
    while not path.exists():
        if job.cancelled:
            ledger("abort")
            return -1
        time.sleep(0.001)
    ledger("end")
    return os.getpid()


@app.task(max_attempts=25, backoff=0.05)
async def fail_once_after(barrier: str) -> int:
    """Waits until the file ``barrier`` exists; its first attempt then fails, the retry
    completes (a batch's last job, retried to success)."""
    ledger("start")
    while not Path(barrier).exists():
        await asyncio.sleep(0.005)
    if current_job().attempt == 1:
        ledger("fail")
        raise RuntimeError("planned failure of the batch's last job")
    ledger("end")
    return os.getpid()
