"""A granted limit (``Permit``): a concurrency limiter's leased slot, renewed while it
is held and given back on release; see ``limiters.py``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any

from .._errors import ConveyorError
from .._storage import LimiterSlotParams, Storage

log = logging.getLogger("conveyor.limiter")


class Permit:
    """A granted limit: for a concurrency limiter, a leased slot renewed while held.
    Release it (``release()``, ``await release_async()``, or leave its ``with``)."""

    def __init__(self, name: str, key: str, holder: str, lease: float, storage: Storage,
                 bridge: Callable[[Coroutine[Any, Any, None]], None] | None) -> None:
        self.name, self.key, self.holder, self.lease = name, key, holder, lease
        self.storage = storage
        #: The app's sync bridge when acquired by the sync API (its loop renews).
        self._bridge = bridge
        self._renewing: asyncio.Task[None] | None = None
        self.released = False

    def __repr__(self) -> str:
        return f"<Permit {self.name!r} key={self.key!r} holder={self.holder!r}>"

    def params(self, limit: int = 1) -> LimiterSlotParams:
        return LimiterSlotParams(self.name, self.key, self.holder, limit,
                                 self.lease)

    def start_renewing(self) -> None:
        self._renewing = asyncio.get_running_loop().create_task(self._renew())
        _HELD.add(self)

    async def _renew(self) -> None:
        """Renew the lease every third of it; a lease lost (the process stalled past
        it) is not taken back: the slot may be someone else's by now."""
        params = self.params()
        while True:
            await asyncio.sleep(self.lease / 3)
            try:
                if not await self.storage.limiter_slot_renew(params):
                    log.warning("limiter %r: the lease of %s ran out before it was renewed",
                                self.name, self.holder)
                    return
            except ConveyorError as exc:  # the database away: try again next time
                log.warning("limiter %r: could not renew a lease (%s)", self.name, exc)

    async def release_async(self) -> None:
        """Give the slot back at once (a rate limit's start is spent: nothing to do)."""
        if self.released:
            return
        self.released = True
        _HELD.discard(self)
        if self._renewing is not None:
            self._renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewing
            await release_quietly(self.storage, self.params())

    def release(self) -> None:
        if self._bridge is not None:
            self._bridge(self.release_async())
            return
        raise RuntimeError("a permit of acquire_async() is released with "
                           "'await permit.release_async()'")

    def __enter__(self) -> Permit:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()

    async def __aenter__(self) -> Permit:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.release_async()


async def release_quietly(storage: Storage, params: LimiterSlotParams) -> None:
    try:
        await storage.limiter_slot_release(params)
    except ConveyorError as exc:  # its lease runs out instead
        log.warning("limiter %r: could not release a slot (%s); its lease frees it",
                    params.name, exc)


#: Slots held now, renewed by this process (``release_held`` gives them back on close).
_HELD: weakref.WeakSet[Permit] = weakref.WeakSet()


async def release_held(storage: Storage) -> None:
    """Give back every slot still held through ``storage`` (the app closes it): at
    once, rather than when their leases run out, and without renewals left pending on
    a loop about to close."""
    for permit in [p for p in _HELD if p.storage is storage]:
        await permit.release_async()


_BACKGROUND: set[asyncio.Task[None]] = set()


def spawn(coro: Any) -> None:
    with contextlib.suppress(RuntimeError):
        task = asyncio.get_running_loop().create_task(coro)
        _BACKGROUND.add(task)
        task.add_done_callback(_BACKGROUND.discard)
