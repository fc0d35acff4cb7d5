"""Fair keys over any backend: the reads and settings that are one statement, once.

The fair claim itself is each backend's (``job_fetch_available`` with ``fair=True``):
the plan is ``fairness.py``'s, the transaction the backend's own.
"""

from __future__ import annotations

import time
from typing import Any

from .composition import CompositionStorage
from .control_types import FairKeyRow, FairWeightSetParams
from .fairness import PLAIN, FairKey, PlainProbe, key_rows


class FairStorage(CompositionStorage):
    """``CompositionStorage`` plus the fair keys' reads and weights."""

    _plain_probe: PlainProbe | None = None

    def _fair_keys_values(self, queue: str) -> dict[str, Any]:
        """``job_fair_keys``' values: its look for keyless jobs only when due."""
        if self._plain_probe is None:
            self._plain_probe = PlainProbe()
        return {"queue": queue,
                "lookahead": self._plain_probe.lookahead(queue, time.monotonic())}

    def _fair_keys_read(self, values: dict[str, Any], rows: Any) -> list[FairKey]:
        """The keys of ``job_fair_keys``' rows; remembers whether keyless jobs were seen."""
        keys = key_rows(rows)
        if self._plain_probe is not None:
            self._plain_probe.found(values["queue"], keys, time.monotonic(),
                                    values["lookahead"] > 0)
        return keys

    async def job_fair_pending(self, queue: str) -> bool:
        """Does ``queue`` have available fair-keyed jobs? (one probe of the fair index)"""
        rows = await self._read("job_fair_pending", {"queue": queue})
        return bool(rows and rows[0]["pending"])

    async def fair_weight_set(self, params: FairWeightSetParams) -> None:
        await self._write("fair_weight_set", {"queue": params.queue, "fair_key": params.key,
                                              "weight": float(params.weight)})

    async def fair_key_list(self, queue: str, *, limit: int = 1000) -> list[FairKeyRow]:
        """A queue's keys with waiting jobs (and keys with a weight set), by key."""
        rows = await self._read("fair_key_list", {"queue": queue, "limit": limit})
        return [FairKeyRow(r["queue"], r["fair_key"], int(r["waiting"]), float(r["weight"]),
                           float(r["vtime"])) for r in rows if r["fair_key"] != PLAIN]

    async def fair_key_prune(self, limit: int) -> int:
        """One batch of ``fair_key_prune``: rows of keys served once and idle now, which
        the claims would otherwise keep forever (a key per tenant or user churns)."""
        return len(await self._write("fair_key_prune", {"limit": limit}))
