"""Helpers to run an in-process worker until a condition holds, with a deadline, and to
stop the worker processes of the process tests."""

from __future__ import annotations

import asyncio
import functools
import multiprocessing.process
import queue
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from conveyor import Conveyor, Job, JobState, WorkerConfig
from conveyor._runtime import Worker


def aio(fn: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """Run an async test on a fresh loop; close the apps it was given on that loop."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> None:
        async def main() -> None:
            try:
                await fn(*args, **kwargs)
            finally:
                for value in [*args, *kwargs.values()]:
                    if isinstance(value, Conveyor):
                        await value.close_async()

        asyncio.run(main())

    return run


def run_then_close(app: Conveyor, main: Callable[[], Awaitable[object]]) -> None:
    """Run ``main`` on a fresh loop, then close ``app`` on that loop."""

    async def wrapped() -> None:
        try:
            await main()
        finally:
            await app.close_async()

    asyncio.run(wrapped())


def burst(app: Conveyor, timeout: float = 60.0) -> None:
    """Run a burst worker on every queue of ``app`` until nothing is left, then close it."""
    run_then_close(app, lambda: asyncio.wait_for(
        app.run_worker(config=WorkerConfig(burst=True)), timeout))


FAST = WorkerConfig(
    queues={"default": 10},
    lease_ttl=5.0,
    heartbeat_interval=0.1,
    rescue_interval=0.1,
    stage_interval=0.05,
    shutdown_timeout=5.0,
)


async def run_worker_until(
    app: Conveyor,
    done: Callable[[], Awaitable[bool]],
    config: WorkerConfig = FAST,
    timeout: float = 20.0,
    during: Callable[[Worker], Awaitable[None]] | None = None,
) -> Worker:
    """Start a worker, optionally act while it runs, stop it once ``done()`` holds."""
    worker = Worker(app.registry, await app.storage(), config)
    task = asyncio.create_task(worker.run())
    try:
        if during is not None:
            await during(worker)
        deadline = asyncio.get_running_loop().time() + timeout
        while not await done():
            if task.done():
                await task  # surfaces a crash
                raise AssertionError("worker stopped before the condition held")
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"condition not reached within {timeout}s")
            await asyncio.sleep(0.01)
    finally:
        worker.request_stop()
        await asyncio.wait_for(task, timeout=30)
    return worker


def all_final(app: Conveyor) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        counts = await app.count_jobs_async()
        return sum(counts[s] for s in ("completed", "cancelled", "discarded")) == sum(counts.values())

    return check


def in_state(app: Conveyor, job: Job, *states: JobState) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        current = await app.get_job_async(job.id)
        return current is not None and current.state in states

    return check


def stop_processes(procs: Sequence[subprocess.Popen[Any]], grace: float) -> None:
    """SIGTERM every live process, wait up to ``grace`` seconds for all of them (one
    deadline), then SIGKILL what is left: the teardown of the process tests."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def gather_reports(procs: Sequence[multiprocessing.process.BaseProcess], results: Any,
                   count: int, timeout: float, join_timeout: float = 30.0) -> list[Any]:
    """Start ``procs`` (multiprocessing), take ``count`` reports from ``results`` within
    ``timeout`` seconds, and check that each process then exits 0. A process still alive
    on the way out, whatever happened, is killed (by pid, not left to the next test)."""
    for proc in procs:
        proc.start()
    got: list[Any] = []
    try:
        deadline = time.monotonic() + timeout
        while len(got) < count:
            try:
                got.append(results.get(timeout=max(deadline - time.monotonic(), 0.1)))
            except queue.Empty:
                raise AssertionError(f"only {len(got)} of {count} reports; exit codes "
                                     f"{[p.exitcode for p in procs]}") from None
        for proc in procs:
            proc.join(timeout=join_timeout)
            assert proc.exitcode == 0, f"exit code {proc.exitcode}"
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=10)
    return got
