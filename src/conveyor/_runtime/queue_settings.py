"""Live queue settings (pause, concurrency, rate limit, default backoff) applied to this
node's producers and executor."""

from __future__ import annotations

import logging
from collections.abc import Mapping, MutableMapping

from .._limits import RateLimit
from .._storage import QueueRow, Storage
from .._task_retry import QueueBackoff, parse_queue_backoff
from .producer import Producer
from .service import Service

log = logging.getLogger("conveyor.worker")


class QueueSettings(Service):
    """Applies queue settings from the database to this node's producers, within about
    one interval of a change."""

    name = "queue-settings"
    runs_at_start = True

    def __init__(self, storage: Storage, node_id: str, producers: Mapping[str, Producer],
                 interval: float,
                 backoffs: MutableMapping[str, QueueBackoff] | None = None) -> None:
        self._storage, self._node_id, self._producers = storage, node_id, producers
        self.interval = interval
        #: Filled in place with each queue's default backoff (the executor reads it).
        self.backoffs: MutableMapping[str, QueueBackoff] = {} if backoffs is None else backoffs
        self._warned: set[tuple[str, str]] = set()

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
        self._apply_backoffs(rows)
        return limits

    def _apply_backoffs(self, rows: Mapping[str, QueueRow]) -> None:
        """Each queue's default backoff; a spec this version cannot read (written
        around the API) is logged and ignored, the built-in backoff applies."""
        for name in self._producers:
            spec = rows[name].backoff if name in rows else None
            if spec is None:
                self.backoffs.pop(name, None)
                continue
            try:
                self.backoffs[name] = parse_queue_backoff(spec)
            except ValueError as exc:
                if (name, spec) not in self._warned:  # once, not every interval
                    self._warned.add((name, spec))
                    log.warning("queue %r: ignoring its backoff: %s", name, exc)
                self.backoffs.pop(name, None)

    async def _serving(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for node in await self._storage.node_list():
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
