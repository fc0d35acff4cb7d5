"""SQLite's fair claim: ``fairness.FairPlan``'s rounds in the storage thread's write
transaction (processes sharing the file take it in turn, so the keys' virtual times
are exact), one statement per key and round."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..fairness import MAX_ROUNDS, PLAIN, FairKey, FairPlan, key_rows
from ..rows import claim_columns
from . import batch

_COLUMNS = claim_columns("sqlite")
_PRIORITY, _SCHEDULED = _COLUMNS.index("priority"), _COLUMNS.index("scheduled_at")


def _claim_order(row: Any) -> tuple[Any, ...]:
    """A claim row's place in claim order (RETURNING order is not guaranteed)."""
    return (-row[_PRIORITY], row[_SCHEDULED], row[0])


def fair_claim(c: sqlite3.Connection, queries: Mapping[str, str], limit: int,
               values: Mapping[str, Any], keys: Mapping[str, Any],
               read_keys: Callable[[Sequence[Any]], list[FairKey]],
               routed: str) -> list[Any]:
    """Claim up to ``limit`` jobs in turns; their tuple rows (``claim_columns``) in turn
    order. ``values``: the claim's (owner, lease, a routed claim's labels and tasks);
    ``keys``: ``job_fair_keys``' (queue, lookahead), its rows made keys by ``read_keys``."""
    read = queries["job_fair_keys"]
    plan = FairPlan(read_keys(c.execute(read, keys).fetchall()), limit)
    for _ in range(MAX_ROUNDS):
        step = plan.round()
        if step is None:
            break
        priority, asked = step
        got = {}
        for key, n in asked.items():
            name = "job_fetch_available_fair" + ("_plain" if key == PLAIN else "")
            got[key] = sorted(batch.claim(c, queries[name + routed], {  # several claims:
                **values, **keys, "fair_key": key, "priority": priority, "limit": n},
                lenient=True), key=_claim_order)  # text decoded leniently, as they go
        if not plan.served(asked, got):
            break
        plan.refresh(key_rows(c.execute(read, keys)))
    c.executemany(queries["job_fair_served"], [
        {"queue": keys["queue"], "fair_key": k, "vtime": v} for k, v in plan.vtimes().items()])
    return plan.rows()
