"""``current_job()``: what a running handler can learn about its own job."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import threading
from typing import Any

from ._job import Job


class CancelFlag:
    """Set once, read from any thread: all a handler's context needs of an Event, at a
    tenth of the cost of creating one (a context is made for every job)."""

    __slots__ = ("_seen", "_set")

    def __init__(self) -> None:
        self._set = False
        #: True once the handler read ``cancelled`` while it was set: a return after
        #: that answers the cancel; a return without it finished the work.
        self._seen = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set

    def seen(self) -> bool:
        return self._seen


class ShutdownSignal:
    """Set once when the worker starts draining (SIGTERM, SIGINT, ``stop()``), shared by
    every job it runs. Sync handlers wait on it like a ``threading.Event``; async ones
    await ``JobContext.wait_shutdown()``. One per worker, so a job's context stays cheap.

    Example: ``if current_job().shutdown_requested.wait(timeout=1): raise Snooze(0)``
    """

    __slots__ = ("_event", "_lock", "_waiters")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._waiters: set[asyncio.Future[None]] = set()

    def set(self) -> None:
        with self._lock:
            self._event.set()
            waiters, self._waiters = self._waiters, set()
        for future in waiters:  # each on its own loop, from whatever thread sets this
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits there
                future.get_loop().call_soon_threadsafe(_resolve, future)

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block this thread until shutdown starts or ``timeout`` passes; True if it started."""
        return self._event.wait(timeout)

    async def wait_async(self, timeout: float | None = None) -> bool:
        """Await shutdown (or ``timeout``); True if it started."""
        if self._event.is_set():
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:
            if self._event.is_set():
                return True
            self._waiters.add(future)
        try:
            await asyncio.wait_for(asyncio.shield(future), timeout)
        except TimeoutError:
            return False
        finally:
            with self._lock:
                self._waiters.discard(future)
        return True


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


#: The signal of a context made outside a worker (tests, inline runs): never set.
_NO_SHUTDOWN = ShutdownSignal()


@dataclasses.dataclass(slots=True)
class JobContext:
    """The running job, as its handler sees it.

    Example: ``if current_job().cancelled: return``
    """

    job: Job
    _cancel: CancelFlag = dataclasses.field(default_factory=CancelFlag)
    _shutdown: ShutdownSignal = _NO_SHUTDOWN

    @property
    def id(self) -> int:
        return self.job.id

    @property
    def attempt(self) -> int:
        return self.job.attempt

    @property
    def task(self) -> str:
        return self.job.task

    @property
    def queue(self) -> str:
        return self.job.queue

    @property
    def args(self) -> list[Any]:
        return self.job.args

    @property
    def kwargs(self) -> dict[str, Any]:
        return self.job.kwargs

    @property
    def cancelled(self) -> bool:
        """True once an operator cancelled this job or the worker must give it up.

        Sync handlers check it between steps; async handlers also get CancelledError.
        A handler that saw it and returns ends ``cancelled``; one that returns without
        having looked finished its work and ends ``completed`` (a late cancel never
        overwrites a success). ``raise Cancel(...)`` is the explicit way.
        """
        flag = self._cancel
        if flag._set:
            flag._seen = True
            return True
        return False

    @property
    def shutting_down(self) -> bool:
        """True once this job's worker started draining: a long job should checkpoint
        and give itself back (``raise Snooze(0)``) before ``shutdown_timeout`` runs out."""
        return self._shutdown.is_set()

    @property
    def shutdown_requested(self) -> ShutdownSignal:
        """For sync handlers: ``.wait(timeout)`` blocks until shutdown starts (True) or the
        timeout passes (False), ``.is_set()`` reads it, like a ``threading.Event``."""
        return self._shutdown

    async def wait_shutdown(self, timeout: float | None = None) -> bool:
        """Await the worker's shutdown; True once it started, False after ``timeout``.

        Example: ``await current_job().wait_shutdown(); save(progress); raise Snooze(0)``
        """
        return await self._shutdown.wait_async(timeout)


_CURRENT: contextvars.ContextVar[JobContext] = contextvars.ContextVar("conveyor_current_job")


def current_job() -> JobContext:
    """The job the calling handler is running.

    Example: ``print(current_job().id, current_job().attempt)``
    """
    try:
        return _CURRENT.get()
    except LookupError:
        raise RuntimeError("current_job() called outside a running Conveyor job") from None


def set_current(ctx: JobContext) -> contextvars.Token[JobContext]:
    return _CURRENT.set(ctx)


def reset_current(token: contextvars.Token[JobContext]) -> None:
    _CURRENT.reset(token)
