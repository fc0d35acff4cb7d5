"""Batched, group-committed acknowledgements.

Outcomes queue up; one flush writes everything pending in one round trip, and what
arrives while a flush is in flight goes out in the next. No timer, so no idle latency.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable

from .. import _payload
from .._errors import DatabaseUnavailableError
from .._storage import JobAck, JobAckManyParams, Storage

log = logging.getLogger("conveyor.acker")


class Acker:
    """Example: ``acker.push(ack); await acker.drain()``"""

    name = "acker"

    def __init__(self, storage: Storage, on_flushed: Callable[[list[JobAck], set[int]], None],
                 node: str | None = None, retire: bool = False):
        """``retire``: plain completions go straight to history (``JobAckManyParams``),
        for a worker whose ``archive_after`` is 0."""
        self._storage = storage
        self._node = node
        self._retire = retire
        self._on_flushed = on_flushed
        self._pending: list[JobAck] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.flushes = 0

    def push(self, ack: JobAck) -> None:
        pending = self._pending
        pending.append(ack)
        if len(pending) == 1:  # the first of a batch: the others find both done already
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
                applied = set(await self._storage.job_ack_many(
                    JobAckManyParams(batch, self._node, self._retire)))
                break
            except DatabaseUnavailableError as exc:  # the database is away: keep, retry
                log.warning("ack flush of %d failed, retrying: %s", len(batch), exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
            except Exception as exc:  # the database refused a row: find it, do not wedge
                log.error("ack flush of %d refused (%s); writing one by one", len(batch), exc)
                try:
                    applied = await self._one_by_one(batch)
                    break
                except DatabaseUnavailableError:
                    await asyncio.sleep(delay)
        self.flushes += 1
        self._on_flushed(batch, applied)
        return len(batch)

    async def _one_by_one(self, batch: list[JobAck]) -> set[int]:
        """Write each ack alone; one the database refuses is written without its result
        and with a note instead of its error, and dropped if even that fails (its lease
        then runs out and the job is rescued)."""
        applied: set[int] = set()
        for ack in batch:
            for attempt in (ack, _stripped(ack)):
                try:
                    applied.update(await self._storage.job_ack_many(
                        JobAckManyParams([attempt], self._node, self._retire)))
                    break
                except DatabaseUnavailableError:
                    raise
                except Exception as exc:
                    log.error("outcome of job %d could not be stored: %s", ack.id, exc)
        return applied

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


def _stripped(ack: JobAck) -> JobAck:
    note = _payload.dumps({"error": "the outcome of this attempt could not be stored"})
    return dataclasses.replace(ack, result_json=None,
                               error_json=note if ack.error_json is not None else None)
