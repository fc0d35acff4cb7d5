"""Batched, group-committed acknowledgements.

Outcomes queue up; one flush writes everything pending in one round trip, and what
arrives while a flush is in flight goes out in the next. No timer, so no idle latency.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from .._storage import Storage
from .._storage._protocol import JobAck, JobAckManyParams

log = logging.getLogger("conveyor.acker")


class Acker:
    """Example: ``acker.push(ack); await acker.drain()``"""

    name = "acker"

    def __init__(self, storage: Storage, on_flushed: Callable[[list[JobAck], set[int]], None]):
        self._storage = storage
        self._on_flushed = on_flushed
        self._pending: list[JobAck] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.flushes = 0

    def push(self, ack: JobAck) -> None:
        self._pending.append(ack)
        self._idle.clear()
        self._wake.set()

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def run_once(self) -> int:
        """Flush what is pending now; returns how many acks were written."""
        batch, self._pending = self._pending, []
        if not batch:
            return 0
        delay = 0.05
        while True:
            try:
                applied = set(await self._storage.job_ack_many(JobAckManyParams(batch)))
                break
            except Exception as exc:  # the database is away: keep the batch, retry
                log.warning("ack flush of %d failed, retrying: %s", len(batch), exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        self.flushes += 1
        self._on_flushed(batch, applied)
        return len(batch)

    async def run(self, stopping: asyncio.Event) -> None:
        """Flush until stopped; after ``stopping`` is set, flush what remains and return."""
        while True:
            if not self._pending:
                self._idle.set()
                if stopping.is_set():
                    return
                waiter = asyncio.ensure_future(self._wake.wait())
                stopper = asyncio.ensure_future(stopping.wait())
                await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                stopper.cancel()
            self._wake.clear()
            await self.run_once()

    async def drain(self) -> None:
        await self._idle.wait()
