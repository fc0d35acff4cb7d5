"""Leader election: one node at a time runs the cluster-wide chores (cron, pruning,
depth samples)."""

from __future__ import annotations

import logging
import time

from .._storage import LeaderElectParams, LeaderResignParams, Storage
from .service import Service

log = logging.getLogger("conveyor.cluster")


class LeaderElector(Service):
    """Holds the leader lease while it can renew it; a dead leader's lease simply
    expires and the next node to ask takes it with a higher term."""

    name = "leader"
    runs_at_start = True

    def __init__(self, storage: Storage, node_id: str, ttl: float) -> None:
        self._storage, self.node_id, self.ttl = storage, node_id, ttl
        self.interval = ttl / 3
        self.term = 0
        self._valid_until = 0.0

    @property
    def is_leader(self) -> bool:
        # Stop acting a little before the lease could have passed to someone else.
        return time.monotonic() < self._valid_until - self.interval / 2

    async def run_once(self) -> bool:
        asked = time.monotonic()
        row = await self._storage.leader_elect(LeaderElectParams(self.node_id, self.ttl))
        was = self.is_leader
        if row is not None and row.node_id == self.node_id:
            self._valid_until, self.term = asked + self.ttl, row.term
            if not was:
                log.info("this node is now the leader (term %d)", row.term)
        else:
            self._valid_until = 0.0
            if was:
                log.warning("leadership lost to %s", row.node_id if row else "nobody")
        return self.is_leader

    async def stop(self) -> None:
        await self.resign()

    async def resign(self) -> None:
        self._valid_until = 0.0
        await self._storage.leader_resign(LeaderResignParams(self.node_id))
