"""The archiver: moves finished jobs from the hot table to history, on the leader only.

The hot table then holds live jobs only, so its indexes stay small and in memory
whatever the retention; reads see both tables (the ``conveyor_jobs_all`` view). Which
rows move is one rule, written once in ``<dialect>/sql/history.sql``
(``job_archive_pick``): finished, older than ``archive_after``, and not holding a unique
claim. Moving changes no job's state, so it emits no ``StateChange``. On PostgreSQL it
also makes history's day partitions ahead of time (hourly), so rows never land in the
DEFAULT partition that retention cannot drop. Every node, leader or not, makes them once
at its start too: with ``archive_after`` 0 its acks write plain completions straight to
history (``JobAckManyParams.retire``), and a node may start on a database no leader has
prepared for days (the migration made only its first days)."""

from __future__ import annotations

import logging
import time

from .._storage import JobArchiveParams, Storage
from .service import Leadership, Service

log = logging.getLogger("conveyor.cluster")

#: Day partitions made ahead: today and this many days after.
DAYS_AHEAD = 2
#: Seconds between checks that the partitions ahead exist.
PREPARE_EVERY = 3600.0


class Archiver(Service):
    """Moves finished jobs in bounded batches (one short transaction each) until a batch
    comes back short or ``max_batches`` ran; the next pass goes on."""

    name = "archiver"

    def __init__(self, storage: Storage, leader: Leadership | None, interval: float,
                 after: float, batch: int = 5000, max_batches: int = 20) -> None:
        self._storage, self._leader = storage, leader
        self.interval = interval
        self._params = JobArchiveParams(after=after, limit=batch)
        self._max_batches = max_batches
        self._prepared_at: float | None = None

    async def start(self) -> None:
        """Make the partitions ahead on any node (see the module docstring); a failure
        is logged, not raised: rows then go to DEFAULT, and the leader tries again."""
        try:
            await self._prepare()
        except Exception as exc:
            log.warning("history partitions could not be made ahead (%s): %s",
                        type(exc).__name__, exc)

    async def run_once(self) -> int:
        """How many jobs moved."""
        if self._leader is not None and not self._leader.is_leader:
            return 0
        if self._prepared_at is None or time.monotonic() - self._prepared_at >= PREPARE_EVERY:
            await self._prepare()
        total = 0
        for _ in range(self._max_batches):
            moved = await self._storage.job_archive(self._params)
            total += moved
            if moved < self._params.limit:
                break
        return total

    async def _prepare(self) -> None:
        """History's day partitions ahead (today and DAYS_AHEAD after), noted as done."""
        made = await self._storage.job_history_prepare(DAYS_AHEAD)
        self._prepared_at = time.monotonic()
        if made:
            log.info("made %d history partition(s) ahead", made)
