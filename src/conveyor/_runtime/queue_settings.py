"""Live queue settings (pause, concurrency, rate limit) applied to this node's producers."""

from __future__ import annotations

from collections.abc import Mapping

from .._limits import RateLimit
from .._storage import NodeListParams, QueueRow, Storage
from .producer import Producer
from .service import Service


class QueueSettings(Service):
    """Applies queue settings from the database to this node's producers, within about
    one interval of a change."""

    name = "queue-settings"

    def __init__(self, storage: Storage, node_id: str, producers: Mapping[str, Producer],
                 interval: float) -> None:
        self._storage, self._node_id, self._producers = storage, node_id, producers
        self.interval = interval

    async def start(self) -> None:
        await self.run_once()

    async def run_once(self) -> dict[str, int]:
        rows = {q.name: q for q in await self._storage.queue_list()}
        serving: dict[str, list[str]] | None = None
        limits: dict[str, int] = {}
        for name, producer in self._producers.items():
            row = rows.get(name)
            limit = producer.configured_limit
            if row is not None and row.concurrency is not None:
                if row.scope == "per_node":
                    limit = row.concurrency
                else:
                    serving = serving or await self._serving()
                    limit = fair_share(row, serving.get(name, []), self._node_id)
            rate = RateLimit(row.rate_limit) if row is not None and row.rate_limit else None
            producer.apply(paused=bool(row and row.paused), limit=limit, rate_limit=rate)
            limits[name] = limit
        return limits

    async def _serving(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for node in await self._storage.node_list(NodeListParams()):
            if node.alive:
                for queue in node.queues:
                    out.setdefault(queue, []).append(node.id)
        return out


def fair_share(row: QueueRow, nodes: list[str], node_id: str) -> int:
    """Split a queue's total concurrency across the live nodes serving it: every node
    gets the floor, the first ones (by id) one more for the remainder."""
    total = row.concurrency or 0
    members = sorted(set(nodes) | {node_id})
    base, extra = divmod(total, len(members))
    return base + (1 if members.index(node_id) < extra else 0)
