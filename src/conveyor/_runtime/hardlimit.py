"""Hard time limits of sync handlers (``hard_timeout_grace``), the child's side.

A sync handler runs in a thread that Python cannot interrupt. At its soft ``timeout``
the attempt fails with ``TaskTimedOut``; a thread still running ``hard_timeout_grace``
later makes the Recycler replace the process at once. A handler in C code that holds
the GIL stops the event loop too, so neither can happen: under the supervisor each
child tells it, through a pipe (``WATCHDOG_ENV`` names its fd; every line ends with
``\\n``):

- ``N<node>``: this child's worker node id, once;
- ``=<job> <lease token>``: a job claimed (before it starts);
- ``~<job> <job> ...``: those jobs' outcomes written (or dropped: lease lost);
- ``+<job> <hard deadline> <soft deadline>``: a sync handler's thread starts (epoch s);
- ``-<job>``: that thread ended.

The supervisor kills a child still alive a margin past a hard deadline and gives its
replacement a ``Handoff`` (see ``handoff``). Nothing here runs unless a hard limit is
configured (the pipe: under the supervisor)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import dataclasses
import functools
import os
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from .._config import WATCHDOG_ENV
from .._errors import TaskTimedOut
from .._job import Job
from .recycler import Overdue

P = TypeVar("P")


class Watchdog:
    """The child's end of the supervisor's pipe. A write that fails (a full pipe: the
    supervisor reads every 0.1 s) is dropped: it never blocks a job; a job it misses
    returns through the lease-expiry rescue, as without a watchdog."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        with contextlib.suppress(OSError):
            os.set_blocking(fd, False)

    @classmethod
    def from_env(cls) -> Watchdog | None:
        value = os.environ.get(WATCHDOG_ENV, "")
        return cls(int(value)) if value.isdigit() else None

    def say(self, lines: str) -> None:
        with contextlib.suppress(OSError):
            os.write(self.fd, lines.encode())

    def starting(self, start: Callable[[Job, P], None]) -> Callable[[Job, P], None]:
        """``start`` (the producers' callback), telling each job's lease first."""
        say = self.say

        def leased(job: Job, producer: P) -> None:
            say(f"={job.id} {job.lease_token}\n")
            start(job, producer)

        return leased

    def settled(self, ids: Iterable[int]) -> None:
        text = " ".join(map(str, ids))
        if text:
            self.say(f"~{text}\n")

    def watch(self, job_ids: Iterable[int], timeout: float, grace: float) -> None:
        now = time.time()
        soft, hard = now + timeout, now + timeout + grace
        self.say("".join(f"+{i} {hard:.3f} {soft:.3f}\n" for i in job_ids))

    def unwatch(self, job_ids: Iterable[int], _: object) -> None:
        self.say("".join(f"-{i}\n" for i in job_ids))


@dataclasses.dataclass(slots=True)
class HardLimit:
    """An executor's hard limit: ``grace`` (None: not configured, nothing is watched),
    the threads past their soft timeout (the Recycler's), the supervisor's pipe."""

    grace: float | None = None
    overdue: list[Overdue] = dataclasses.field(default_factory=list)
    watchdog: Watchdog | None = None


async def run_in_thread(pool: concurrent.futures.Executor, limit: HardLimit,
                        call: Callable[[], Any], job_ids: list[int], timeout: float | None,
                        on_timeout: Callable[[], None]) -> Any:
    """A sync handler (of one job, or of a chunk's ``job_ids``) in the executor's
    threads, under ``timeout``. At the timeout, ``TaskTimedOut`` is raised and the thread
    runs on (Python cannot interrupt it, it sees ``ctx.cancelled`` through
    ``on_timeout``); with a hard limit it is watched by the Recycler and, under the
    supervisor, told to the watchdog before it starts (one that never lets go of the
    GIL stops this loop at once)."""
    loop = asyncio.get_running_loop()
    watchdog, grace = limit.watchdog, limit.grace
    watched = watchdog is not None and timeout is not None and grace is not None
    if watched:
        watchdog.watch(job_ids, timeout, grace)  # type: ignore[union-attr,arg-type]
    future = loop.run_in_executor(pool, contextvars.copy_context().run, call)
    if watched:
        future.add_done_callback(functools.partial(watchdog.unwatch, job_ids))  # type: ignore[union-attr]
    done, _ = await asyncio.wait({future}, timeout=timeout)
    if not done:
        on_timeout()
        if grace is not None:
            limit.overdue.extend(Overdue(i, future, loop.time() + grace) for i in job_ids)
        raise TaskTimedOut
    return future.result()
