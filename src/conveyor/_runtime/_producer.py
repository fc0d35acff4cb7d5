"""A producer per queue: claims as many jobs as there are free slots, then waits."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from .._job import Job
from .._storage import Storage
from .._storage._protocol import JobFetchAvailableParams

log = logging.getLogger("conveyor.producer")


class Producer:
    """Demand-driven: demand = limit - running. Wakes on a notification, on a freed
    slot, or after the poll interval, whichever comes first."""

    def __init__(
        self,
        storage: Storage,
        queue: str,
        limit: int,
        owner: str,
        lease_ttl: float,
        fetch_limit: int,
        start: Callable[[Job, Producer], None],
    ) -> None:
        self.queue = queue
        self.limit = limit
        self.running = 0
        #: True after a fetch found nothing and nothing runs here (burst mode uses it).
        self.idle = False
        #: True when the last fetch got all it asked for: there may be more.
        self.saturated = False
        self._storage = storage
        self._owner = owner
        self._lease_ttl = lease_ttl
        self._fetch_limit = fetch_limit
        self._start = start
        self._wake = asyncio.Event()
        self._poll = storage.capabilities.poll_interval

    def wake(self) -> None:
        self._wake.set()

    def finished(self) -> None:
        self.running -= 1
        self._wake.set()

    async def run_once(self) -> int:
        """Claim up to the free capacity and start each job; returns how many."""
        demand = min(self.limit - self.running, self._fetch_limit)
        if demand <= 0:
            return 0
        jobs = await self._storage.job_fetch_available(
            JobFetchAvailableParams(self.queue, demand, self._owner, self._lease_ttl)
        )
        for job in jobs:
            self.running += 1
            self._start(job, self)
        self.idle = not jobs and self.running == 0
        self.saturated = len(jobs) == demand
        return len(jobs)

    async def run(self, stopping: asyncio.Event) -> None:
        failures = 0
        while not stopping.is_set():
            self._wake.clear()
            try:
                claimed = await self.run_once()
                failures = 0
            except Exception as exc:
                failures += 1
                claimed = 0
                log.warning("fetch from queue %r failed: %s", self.queue, exc)
            if claimed and self.saturated and self.running < self.limit:
                continue  # maybe more waiting: ask again at once
            timeout = self._poll * min(2**failures, 16)
            waiter = asyncio.ensure_future(self._wake.wait())
            stopper = asyncio.ensure_future(stopping.wait())
            await asyncio.wait({waiter, stopper}, timeout=timeout,
                               return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            stopper.cancel()
