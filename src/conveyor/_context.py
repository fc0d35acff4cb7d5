"""``current_job()``: what a running handler can learn about its own job."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import math
import os
import re
import socket
import threading
from collections.abc import Mapping
from typing import Any

from . import _payload
from ._job import Job


class CancelFlag:
    """Set once, read from any thread: all a handler's context needs of an Event, at a
    tenth of the cost of creating one (a context is made for every job). Its values
    start as class attributes: making one runs no ``__init__``."""

    _set = False
    #: True once the handler read ``cancelled`` while it was set: a return after
    #: that answers the cancel; a return without it finished the work.
    _seen = False

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


#: Longest progress message kept (characters); a longer one is cut, not refused.
MAX_PROGRESS_MESSAGE = 1_000
#: The cap on a job's meta when no worker set one (ConveyorConfig.max_payload_bytes).
DEFAULT_MAX_META_BYTES = 1024 * 1024


class ProgressEntry:
    """A running job's latest progress and meta, kept in memory: handlers may report
    thousands of times a second, and the worker writes only the latest value of every
    dirty entry, in one statement per flush (``_runtime/progress.py``).

    ``reported`` holds (fraction, message) as one tuple so a flush never reads a
    fraction with another call's message; ``dirty`` is set after the values, so a value
    written while a flush reads is flushed again next time, never lost.
    """

    __slots__ = ("dirty", "job", "max_meta_bytes", "meta", "meta_json", "reported")

    def __init__(self, job: Job, max_meta_bytes: int = DEFAULT_MAX_META_BYTES) -> None:
        self.job = job
        self.max_meta_bytes = max_meta_bytes
        self.reported: tuple[float, str | None] | None = None
        self.meta: dict[str, Any] | None = None
        self.meta_json: str | None = None
        self.dirty = False

    def set_progress(self, fraction: float, message: str | None) -> None:
        if isinstance(fraction, bool) or not isinstance(fraction, int | float):
            raise TypeError(f"progress must be a number from 0.0 to 1.0, got "
                            f"{type(fraction).__name__}")
        if math.isnan(fraction) or not 0.0 <= fraction <= 1.0:
            raise ValueError(f"progress must be from 0.0 to 1.0, got {fraction!r}")
        if message is not None and not isinstance(message, str):
            raise TypeError(f"progress message must be a str or None, got "
                            f"{type(message).__name__}")
        if message is not None:
            message = _storable_text(message[:MAX_PROGRESS_MESSAGE])
        self.reported = (float(fraction), message)
        self.dirty = True

    def update_meta(self, values: Mapping[str, Any]) -> None:
        """Merge ``values`` into the job's meta; refused whole (nothing merged) when a
        key is not a str, a value is not JSON, or the result is over the cap."""
        if not isinstance(values, Mapping):
            raise TypeError(f"update_meta takes a dict, got {type(values).__name__}")
        for key in values:
            if not isinstance(key, str):
                raise TypeError(f"meta keys must be str, got {type(key).__name__} {key!r}")
        merged = {**(self.meta if self.meta is not None else self.job.meta), **values}
        text = _payload.encode_meta(self.job.task, merged, self.max_meta_bytes)
        self.meta, self.meta_json = merged, text
        self.dirty = True


_UNSTORABLE_CHAR = re.compile("[\x00\ud800-\udfff]")


def _storable_text(text: str) -> str:
    """Text both databases store: NUL and lone surrogates become U+FFFD."""
    if text.isascii() and "\x00" not in text:
        return text
    return _UNSTORABLE_CHAR.sub("\ufffd", text)


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerNode:
    """The worker process that runs a job: its node id (as ``list_nodes`` and
    ``Job.ran_on`` give it), host, pid and ``--label``s. One per worker, shared by
    every job it runs."""

    id: str
    hostname: str
    pid: int
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(slots=True)
class JobContext:
    """The running job, as its handler sees it.

    Example: ``if current_job().cancelled: return``
    """

    job: Job
    _cancel: CancelFlag = dataclasses.field(default_factory=CancelFlag)
    _shutdown: ShutdownSignal = _NO_SHUTDOWN
    #: Progress and meta reported by the handler, made on first use (most jobs never
    #: report); a worker's flusher writes it, a context made elsewhere keeps it in memory.
    _progress: ProgressEntry | None = None
    #: The cap on the job's meta (the app's ConveyorConfig.max_payload_bytes).
    _meta_cap: int = DEFAULT_MAX_META_BYTES
    #: The worker running the job; None when it runs outside one (inline, a test).
    _node: WorkerNode | None = None

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
    def node_id(self) -> str | None:
        """The id of the worker node running this attempt (None outside a worker)."""
        return None if self._node is None else self._node.id

    @property
    def hostname(self) -> str:
        """The host of the process running this attempt."""
        return socket.gethostname() if self._node is None else self._node.hostname

    @property
    def pid(self) -> int:
        """The pid of the process running this attempt."""
        return os.getpid() if self._node is None else self._node.pid

    @property
    def labels(self) -> Mapping[str, str]:
        """The ``--label``s of the worker running this attempt (empty outside one)."""
        return {} if self._node is None else self._node.labels

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

    def set_progress(self, fraction: float, message: str | None = None) -> None:
        """Report how far the job is (0.0 to 1.0) and what it does now. Cheap: it
        changes memory only; the worker writes the latest value every ~0.5 s and at
        the job's end, so call it as often as you like.

        Example: ``current_job().set_progress(i / n, f"row {i} of {n}")``
        """
        self._entry().set_progress(fraction, message)

    def update_meta(self, values: Mapping[str, Any]) -> None:
        """Merge keys into the job's ``meta`` (JSON values, capped like meta at
        enqueue by ``ConveyorConfig.max_payload_bytes``); written like progress.

        Example: ``current_job().update_meta({"rows_done": 1200})``
        """
        self._entry().update_meta(values)

    @property
    def progress(self) -> float | None:
        """The fraction this handler last reported (None before the first report)."""
        reported = self._progress.reported if self._progress is not None else None
        return None if reported is None else reported[0]

    @property
    def meta(self) -> dict[str, Any]:
        """The job's meta with this attempt's ``update_meta`` merged in."""
        entry = self._progress
        return dict(entry.meta if entry is not None and entry.meta is not None
                    else self.job.meta)

    def _entry(self) -> ProgressEntry:
        if self._progress is None:
            self._progress = ProgressEntry(self.job, self._meta_cap)
        return self._progress

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
