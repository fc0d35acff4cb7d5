"""Limiters used inside handlers and outside jobs: ``app.limiter("slack", rate="20/s")``,
``app.limiter("ocr", concurrency=3)``, cluster-wide through the database.

A rate limiter takes one start from a GCRA cell of ``conveyor_rate_limits`` (the cells
task rate limits use, keyed ``limiter:NAME[:KEY]``). A concurrency limiter leases a slot
(``conveyor_limiter_slots``): the holder renews the lease while it holds, so a holder
killed with ``kill -9`` frees its slot when the lease runs out and a long hold is never
taken over. The core is async; the sync forms go through the app's one bridge.

Inside a handler, a limit not granted within ``wait`` seconds snoozes the job without
using an attempt (``LimiterSnooze``, a ``Snooze`` the executor already maps); outside a
job it raises ``LimitExceeded`` after ``timeout`` seconds.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import os
import re
import secrets
import socket
import time
from collections.abc import Coroutine
from typing import Any, Protocol, TypeVar

from .._clock import VirtualClock
from .._context import current_job
from .._errors import LimitExceeded, Snooze
from .._limits import parse_rate
from .._storage import (
    LimiterDeclareParams,
    LimiterRow,
    RateRequest,
    Storage,
)
from .permits import Permit, release_quietly, spawn

T = TypeVar("T")


class AppBase(Protocol):
    """What a limiter uses of its app (``base.AppBase``, which holds the limiters)."""

    clock: VirtualClock | None
    limiters: dict[str, Limiter]

    async def storage(self) -> Storage: ...

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T: ...


log = logging.getLogger("conveyor.limiter")
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")
#: Longest key text (the key column allows 500 with the name's prefix).
MAX_KEY = 200
#: The shortest lease (renewed every third of it).
MIN_LEASE = 0.5
#: Seconds a job waiting for a concurrency slot is put off when none freed in ``wait``.
SLOT_RETRY = 1.0


class LimiterSnooze(Snooze):
    """A limit not granted in a handler within ``wait``: the job comes back later
    without using an attempt (the executor handles it as any ``Snooze``)."""


def _number(what: str, value: object, *, low: float = 0.0, none: bool = False) -> Any:
    if value is None and none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} must be a number of seconds, got {value!r}")
    if not low <= value < math.inf:
        raise ValueError(f"{what} must be a finite number of seconds >= {low:g}, "
                         f"got {value!r}")
    return float(value)


def check_limiter_name(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"a limiter's name must be a str, got {name!r}")
    if not NAME.fullmatch(name):
        raise ValueError(f"invalid limiter name {name!r}: use letters, digits, '_', '.' "
                         "or '-', at most 100 characters")
    return name


def _key_text(key: object) -> str:
    if key is None:
        return ""
    if isinstance(key, bool) or not isinstance(key, str | int):
        raise TypeError(f"a limiter key must be a str or an int, got {key!r}")
    text = str(key)
    if not text or len(text) > MAX_KEY:
        raise ValueError(f"a limiter key must be 1 to {MAX_KEY} characters, got {len(text)}")
    return text


def _not_on_a_loop(name: str) -> None:
    """The sync forms block while they wait: on an event loop's thread (an async
    handler) that would stall every task of the loop, the worker's heartbeats too."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(f"limiter {name!r}: the sync form blocks, and this thread runs an "
                       "event loop: use 'async with limiter' or 'await "
                       "limiter.acquire_async()' in async code")


def _in_job() -> int | None:
    """The id of the job the caller runs, None outside a handler."""
    try:
        return current_job().id
    except RuntimeError:
        return None


class Limiter:
    """A cluster-wide limit on how often (``rate``) or how many at once
    (``concurrency``) a piece of code runs, optionally per key. Made by ``app.limiter``.

    Example::

        slack = app.limiter("slack", rate="20/s")
        with slack:                      # or: async with slack:
            post_message(...)
        with ocr.hold(key=account_id):   # or: permit = ocr.acquire(key=account_id)
            run_ocr(...)
    """

    def __init__(self, app: AppBase, name: str, *, rate: str | None = None,
                 concurrency: int | None = None, burst: int = 1, lease: float = 30.0,
                 wait: float = 5.0, timeout: float | None = 30.0) -> None:
        self.name = check_limiter_name(name)
        if rate is None and concurrency is None:
            raise ValueError(f"limiter {name!r} needs rate= (e.g. '20/s') or concurrency=")
        if rate is not None and not isinstance(rate, str):
            raise TypeError(f"rate must be a str like '20/s', got {rate!r}")
        self._interval = 0.0
        if rate is not None:
            count, period = parse_rate(rate)
            self._interval = period / count
        if concurrency is not None:
            if isinstance(concurrency, bool) or not isinstance(concurrency, int):
                raise TypeError(f"concurrency must be an int, got {concurrency!r}")
            if concurrency < 1:
                raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
            raise ValueError(f"burst must be an int >= 1, got {burst!r}")
        self.rate, self.concurrency, self.burst = rate, concurrency, burst
        self.lease = _number("lease", lease, low=MIN_LEASE)
        self.wait = _number("wait", wait)
        self.timeout = _number("timeout", timeout, none=True)
        self._app = app
        self._declared = False
        self._held: contextvars.ContextVar[tuple[Permit, ...]] = contextvars.ContextVar(
            f"conveyor_limiter_{name}", default=())

    def __repr__(self) -> str:
        what = f"rate={self.rate!r}" if self.rate else f"concurrency={self.concurrency}"
        return f"<Limiter {self.name!r} {what}>"

    def options(self) -> dict[str, Any]:
        """The keyword arguments of ``app.limiter`` that make this limiter."""
        return {"rate": self.rate, "concurrency": self.concurrency, "burst": self.burst,
                "lease": self.lease, "wait": self.wait, "timeout": self.timeout}

    # -- the public forms -------------------------------------------------------------------

    def acquire(self, key: str | int | None = None, *, timeout: float | None = None,
                wait: float | None = None) -> Permit:
        """Block until granted; a ``Permit`` to release (or use in ``with``).

        Outside a job, ``LimitExceeded`` after ``timeout`` seconds (the limiter's by
        default); in a handler, the job is snoozed after ``wait`` seconds."""
        job, seconds, text = self._call(key, timeout, wait)
        _not_on_a_loop(self.name)
        return self._app._sync(self._acquire(text, seconds, job, sync=True))

    async def acquire_async(self, key: str | int | None = None, *,
                            timeout: float | None = None,
                            wait: float | None = None) -> Permit:
        """Async twin of ``acquire``. Example: ``permit = await ocr.acquire_async(key=7)``"""
        job, seconds, text = self._call(key, timeout, wait)
        return await self._acquire(text, seconds, job, sync=False)

    def hold(self, key: str | int | None = None, *, timeout: float | None = None,
             wait: float | None = None) -> Hold:
        """A context manager (``with`` or ``async with``) that acquires on entry."""
        self._call(key, timeout, wait)  # bad arguments fail here, not on entry
        return Hold(self, key, timeout, wait)

    # ``with limiter:`` keeps its permit in the caller's context (a thread's, a task's),
    # so one limiter serves every thread and task at once, nested too.

    def __enter__(self) -> Permit:
        permit = self.acquire()
        self._held.set((*self._held.get(), permit))
        return permit

    def __exit__(self, *exc: object) -> None:
        *rest, permit = self._held.get()
        self._held.set(tuple(rest))
        permit.release()

    async def __aenter__(self) -> Permit:
        permit = await self.acquire_async()
        self._held.set((*self._held.get(), permit))
        return permit

    async def __aexit__(self, *exc: object) -> None:
        *rest, permit = self._held.get()
        self._held.set(tuple(rest))
        await permit.release_async()

    # -- the core ---------------------------------------------------------------------------

    def _call(self, key: object, timeout: object, wait: object
              ) -> tuple[int | None, float | None, str]:
        text = _key_text(key)
        job = _in_job()
        if job is not None:
            seconds = self.wait if wait is None else _number("wait", wait)
        else:
            seconds = self.timeout if timeout is None else _number("timeout", timeout)
        return job, seconds, text

    async def _acquire(self, key: str, seconds: float | None, job: int | None, *,
                       sync: bool) -> Permit:
        deadline = None if seconds is None else time.monotonic() + seconds
        storage = await self._app.storage()
        if not self._declared:
            await storage.limiter_declare(LimiterDeclareParams(
                self.name, self.rate, self.concurrency, self.lease))
            self._declared = True
        permit = Permit(self.name, key, _holder(job), self.lease, storage,
                        self._app._sync if sync else None)
        if self.concurrency is not None:
            await self._take_slot(permit, deadline, job)
        if self.rate is not None:
            try:
                await self._take_start(storage, key, deadline, job)
            except BaseException:
                await permit.release_async()
                raise
        return permit

    async def _take_start(self, storage: Storage, key: str, deadline: float | None,
                          job: int | None) -> None:
        cell = f"limiter:{self.name}" + (f":{key}" if key else "")
        request = RateRequest(cell, self._interval, self.burst, 1)
        while True:
            grant = (await storage.rate_limit_acquire([request]))[0]
            if grant.granted:
                return
            left = math.inf if deadline is None else deadline - time.monotonic()
            if grant.wait > left or self._app.clock is not None:
                # Not grantable in time (a virtual clock does not move while we sleep).
                self._refuse(key, job, grant.wait)
            await asyncio.sleep(grant.wait)

    async def _take_slot(self, permit: Permit, deadline: float | None, job: int | None) -> None:
        assert self.concurrency is not None
        params = permit.params(self.concurrency)
        pause = 0.05
        while True:
            try:
                granted = await permit.storage.limiter_slot_acquire(params)
            except BaseException:
                # The grant may have committed before the failure: give it back, or
                # let its lease run out if the database is away.
                spawn(release_quietly(permit.storage, params))
                raise
            if granted:
                permit.start_renewing()
                return
            left = math.inf if deadline is None else deadline - time.monotonic()
            if left <= 0:
                self._refuse(key=permit.key, job=job, retry=SLOT_RETRY)
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, 0.5)

    def _refuse(self, key: str, job: int | None, retry: float) -> None:
        what = f"limiter {self.name!r}" + (f" (key {key!r})" if key else "")
        if job is not None:
            raise LimiterSnooze(max(retry, 0.0))
        raise LimitExceeded(f"{what} did not grant in time; next chance in about "
                            f"{retry:.2f}s", name=self.name, key=key or None,
                            retry_after=retry)


class Hold:
    """``with limiter.hold(key=...)`` / ``async with``: acquire on entry, release on exit."""

    def __init__(self, limiter: Limiter, key: str | int | None, timeout: float | None,
                 wait: float | None) -> None:
        self._limiter, self._key, self._timeout, self._wait = limiter, key, timeout, wait
        self._permit: Permit | None = None

    def __enter__(self) -> Permit:
        self._permit = self._limiter.acquire(self._key, timeout=self._timeout, wait=self._wait)
        return self._permit

    def __exit__(self, *exc: object) -> None:
        if self._permit is not None:
            self._permit.release()

    async def __aenter__(self) -> Permit:
        self._permit = await self._limiter.acquire_async(
            self._key, timeout=self._timeout, wait=self._wait)
        return self._permit

    async def __aexit__(self, *exc: object) -> None:
        if self._permit is not None:
            await self._permit.release_async()


def declare(app: AppBase, name: str, **settings: Any) -> Limiter:
    """``app.limiter``: the app's limiter of that name, made on first use; declared
    again with other settings, refused (two meanings of one name in one app)."""
    limiter = Limiter(app, name, **settings)
    known = app.limiters.setdefault(limiter.name, limiter)
    if known.options() != limiter.options():
        raise ValueError(f"limiter {name!r} is already declared with other settings "
                         f"({known!r}); give this one another name")
    return known


async def list_limiters(app: AppBase) -> list[LimiterRow]:
    """Every limiter the database knows (declared by any process on first use) and
    this app's own not used yet, each with its live holders."""
    rows = {row.name: row for row in await (await app.storage()).limiter_list()}
    now = await (await app.storage()).clock_now()
    for limiter in app.limiters.values():
        rows.setdefault(limiter.name, LimiterRow(limiter.name, limiter.rate,
                                                 limiter.concurrency, limiter.lease, now))
    return [rows[name] for name in sorted(rows)]


def _holder(job: int | None) -> str:
    """Who holds a slot, as the dashboard shows it: host, pid, job, and a random part
    that makes each acquisition its own."""
    where = f"{socket.gethostname()[:60]}:{os.getpid()}"
    return f"{where}:{f'job-{job}:' if job is not None else ''}{secrets.token_hex(4)}"
