"""Cluster-wide queue cool-downs: ``raise Throttle(retry_after=..., scope="queue")``.

The node whose handler raised holds its own producer at once and writes the cool-down to
the database (``conveyor_queue_cooldowns``), where repeated throttles grow it. Every node
reads that small table once per ``settings_interval`` and holds its producer for the
queue until the cool-down ends, so the claim path itself never asks the database about
cool-downs (no query per claim).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import datetime

from .._errors import THROTTLE_COOLDOWN_CAP
from .._storage import QueueCooldownRaiseParams, QueueCooldownRow, Storage
from .producer import Producer
from .service import Service

log = logging.getLogger("conveyor.limits")


class Cooldowns(Service):
    """Writes the cool-downs this node's handlers raise; applies every node's to this
    node's producers within about one interval."""

    name = "cooldowns"
    runs_at_start = True

    def __init__(self, storage: Storage, producers: Mapping[str, Producer],
                 interval: float, cap: float = THROTTLE_COOLDOWN_CAP) -> None:
        self._storage, self._producers = storage, producers
        self.interval, self._cap = interval, cap
        #: The end of the latest cool-down applied per queue (to log each one once).
        self._applied: dict[str, datetime] = {}
        self._writes: set[asyncio.Task[None]] = set()

    def raised(self, queue: str, seconds: float) -> None:
        """A handler of this node raised Throttle(scope="queue"): hold here at once, and
        store it for the others (in the background: the job's outcome does not wait)."""
        producer = self._producers.get(queue)
        if producer is not None:
            producer.hold(seconds)
        write = asyncio.create_task(self._write(queue, seconds))
        self._writes.add(write)
        write.add_done_callback(self._writes.discard)

    async def _write(self, queue: str, seconds: float) -> None:
        try:
            row = await self._storage.queue_cooldown_raise(
                QueueCooldownRaiseParams(queue, seconds, self._cap))
        except Exception as exc:  # the database is away: this node still holds
            log.warning("could not store the cool-down of queue %r (%s): %s; it applies "
                        "on this worker only", queue, type(exc).__name__, exc)
            return
        self.apply(row)

    async def run_once(self) -> dict[str, float]:
        """Apply every active cool-down; returns {queue: seconds remaining}."""
        active = {}
        for row in await self._storage.queue_cooldown_list():
            if self.apply(row):
                active[row.queue] = row.remaining
        return active

    def apply(self, row: QueueCooldownRow) -> bool:
        producer = self._producers.get(row.queue)
        if producer is None or not row.active:
            return False
        producer.hold(row.remaining)
        if self._applied.get(row.queue) != row.cool_until:
            self._applied[row.queue] = row.cool_until
            log.info("queue %r cools down for %.2fs on every worker, until %s (Throttle, "
                     "streak %d)", row.queue, row.remaining,
                     row.cool_until.isoformat(timespec="milliseconds"), row.streak)
        return True

    async def stop(self) -> None:
        if self._writes:  # give the last raised cool-downs a moment to reach the database
            await asyncio.wait(set(self._writes), timeout=5)
