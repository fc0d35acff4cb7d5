"""The stager: makes scheduled and retryable jobs available once they are due."""

from __future__ import annotations

import asyncio
import heapq

from .._storage import StagedJob, Storage
from .service import Service


class Stager(Service):
    """Makes scheduled and retryable jobs available once they are due."""

    name = "stager"

    def __init__(self, storage: Storage, interval: float) -> None:
        self._storage = storage
        self.interval = interval
        self._due: list[float] = []
        self._timer: asyncio.TimerHandle | None = None

    async def run_once(self) -> list[StagedJob]:
        return await self._storage.job_stage_due()

    def stage_in(self, delay: float) -> None:
        """A job of ours becomes due in ``delay`` seconds (it waited for a rate or a
        concurrency limit): stage it right then, not at the next interval."""
        if delay >= self.interval:
            return
        loop = asyncio.get_running_loop()
        heapq.heappush(self._due, loop.time() + delay + 0.015)  # the ack lands a bit later
        self._arm(loop)

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(self._due[0], self._fire, loop) if self._due else None

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        while self._due and self._due[0] <= loop.time():
            heapq.heappop(self._due)
        self.kick()
        self._arm(loop)
