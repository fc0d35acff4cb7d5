"""The rescuer: returns the jobs of dead workers to their queue."""

from __future__ import annotations

import logging

from .._storage import JobRescueExpiredParams, Storage
from .service import Service

log = logging.getLogger("conveyor.worker")


class Rescuer(Service):
    """Returns jobs whose lease expired (their worker died) to the queue."""

    name = "rescuer"

    def __init__(self, storage: Storage, interval: float) -> None:
        self._storage = storage
        self.interval = interval
        # A node is dead past its own ttl (each node stores it in its row).
        self._params = JobRescueExpiredParams()

    async def run_once(self) -> list[int]:
        ids = await self._storage.job_rescue_expired(self._params)
        if ids:
            log.warning("rescued %d job(s) whose lease expired: %s", len(ids), ids[:20])
        return ids
