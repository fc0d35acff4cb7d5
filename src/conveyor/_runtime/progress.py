"""Coalesced progress: what handlers report with ``current_job().set_progress`` and
``update_meta`` lives in memory (``ProgressEntry``); this service writes the latest
value of every dirty entry of every running attempt in one statement per pass, and the
worker flushes once more at a job's end, before its outcome, so the last value stands.
Writes are fenced by the lease token: an attempt that lost its job writes nothing."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from .._context import ProgressEntry
from .._storage import JobProgress, Storage
from .service import Service

log = logging.getLogger("conveyor.worker")


class ProgressFlusher(Service):
    """Example: ``ProgressFlusher(storage, lambda: [ex.ctx for ex in running], 0.5)``"""

    name = "progress"

    def __init__(self, storage: Storage, entries: Callable[[], Iterable[ProgressEntry | None]],
                 interval: float) -> None:
        self._storage = storage
        self._entries = entries
        self.interval = interval
        self._lock = asyncio.Lock()
        #: Statements sent and rows they wrote (tests and metrics read them).
        self.flushes = 0
        self.written = 0

    async def run_once(self) -> int:
        """Write every dirty entry now; returns how many rows the fence let through."""
        async with self._lock:  # a job's end and the timer never send the same value twice
            dirty = [e for e in self._entries() if e is not None and e.dirty]
            if not dirty:
                return 0
            rows = []
            for entry in dirty:
                entry.dirty = False  # before reading: a report landing now flushes next pass
                row = _row(entry)
                if row is not None:
                    rows.append(row)
            if not rows:
                return 0
            try:
                applied = await self._storage.job_progress_many(rows)
            except BaseException:
                for entry in dirty:  # kept for the next pass: the database may be back
                    entry.dirty = True
                raise
            self.flushes += 1
            self.written += len(applied)
            return len(applied)

    def must_flush(self, entry: ProgressEntry | None) -> bool:
        """True when a job's end must wait for a progress write before its outcome: it
        reported since the last pass, or a pass is in flight (it may carry the job's
        last report; an outcome written first would fence that write out)."""
        return entry is not None and (entry.dirty or self._lock.locked())

    async def flush_job(self, entry: ProgressEntry | None) -> None:
        """At a job's end: write its last report (and any other dirty one) before the
        outcome. A failure is logged, never raised: the outcome must still be written."""
        if entry is None or not self.must_flush(entry):
            return
        try:
            await self.run_once()
        except Exception as exc:
            log.warning("progress of job %d not written at its end: %s", entry.job.id, exc)


def _row(entry: ProgressEntry) -> JobProgress | None:
    token = entry.job.lease_token
    if token is None:
        return None
    reported = entry.reported
    return JobProgress(
        id=entry.job.id, lease_token=token,
        progress=None if reported is None else reported[0],
        message=None if reported is None else reported[1],
        meta_json=entry.meta_json,
    )
