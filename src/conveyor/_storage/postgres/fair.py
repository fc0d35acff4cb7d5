"""PostgreSQL's fair claim: a ``fairness.FairPlan`` round in a transaction, under a
transaction-scoped lock per queue (fair claims of a queue take turns across processes,
so the keys' virtual times are exact), pipelined into two round trips: BEGIN, the lock
and the keys; then the claims (a LATERAL statement for the named keys), which write
the keys' new virtual times themselves, and COMMIT.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from ..fairness import MAX_ROUNDS, PLAIN, FairKey, FairPlan, rows_by_key
from ..rows import CLAIM_COLUMNS

_PRIORITY, _SCHEDULED, _FAIR_KEY = (CLAIM_COLUMNS.index(c) for c in
                                    ("priority", "scheduled_at", "fair_key"))


def _claim_order(row: Any) -> tuple[Any, ...]:
    """A claim row's place in claim order (RETURNING order is not guaranteed)."""
    return (-row[_PRIORITY], row[_SCHEDULED], row[0])


def _interleaved(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rows in claim order, keys taking turns: each key's first, then each one's second."""
    seen: dict[Any, int] = {}
    ranked: list[tuple[int, int, tuple[Any, ...]]] = []
    for row in rows:
        rank = seen[row[_FAIR_KEY]] = seen.get(row[_FAIR_KEY], -1) + 1
        ranked.append((rank, len(ranked), row))
    return [row for _, _, row in sorted(ranked, key=lambda r: (r[0], r[1]))]


async def fair_claim(conn: psycopg.AsyncConnection[Any], queries: Mapping[str, str],
                     limit: int, values: Mapping[str, Any], keys: Mapping[str, Any],
                     read_keys: Callable[[Sequence[Any]], list[FairKey]],
                     routed: str) -> list[tuple[Any, ...]]:
    """Claim up to ``limit`` jobs in turns; their rows (``CLAIM_COLUMNS``) in turn order.
    ``values``: the claim's (owner, lease, a routed claim's labels and tasks); ``keys``:
    ``job_fair_keys``' (queue, lookahead), its rows made keys by ``read_keys``. A round
    that ran short (a key without jobs this claimer may take) is followed by another
    transaction without that key, up to ``MAX_ROUNDS``. A claimer without labels or
    task filter, while the queue has no keyless jobs to look for, claims with one
    statement instead (``job_fetch_available_fair_one``: the plan in SQL)."""
    out: list[tuple[Any, ...]] = []
    if not routed and not keys["lookahead"]:  # the common case: one statement
        cur = conn.cursor(row_factory=tuple_row)
        await cur.execute(queries["job_fetch_available_fair_one"], {**values, **keys})
        out = _interleaved(sorted(await cur.fetchall(), key=_claim_order))
        if len(out) >= limit:
            return out  # else: a key ran short (or the work did): rounds for the rest
    dry: set[str] = set()
    for _ in range(MAX_ROUNDS):
        rows, short = await _round(conn, queries, limit - len(out), values, keys,
                                   read_keys, routed, dry)
        out += rows
        if not short or len(out) >= limit:
            break
    return out


async def _round(conn: psycopg.AsyncConnection[Any], queries: Mapping[str, str],
                 limit: int, values: Mapping[str, Any], keys: Mapping[str, Any],
                 read_keys: Callable[[Sequence[Any]], list[FairKey]], routed: str,
                 dry: set[str]) -> tuple[list[tuple[Any, ...]], bool]:
    """One transaction: BEGIN, lock and keys (one round trip), then the claims with the
    keys' new virtual times and COMMIT (one round trip). Adds the keys that ran short to
    ``dry``; returns the rows in turn order and whether a key ran short."""
    claim = {**values, **keys}
    named_cur = plain_cur = None
    async with conn.pipeline(), conn.transaction():
        await conn.execute(queries["job_fair_lock"], keys)
        cur = await conn.execute(queries["job_fair_keys"], keys)
        found = [k for k in read_keys(await cur.fetchall()) if k.key not in dry]
        plan = FairPlan(found, limit)
        step = plan.round()
        if step is not None:
            priority, asked = step
            named = [k for k in asked if k != PLAIN]
            if named:
                start, weight = plan.starts(named)
                named_cur = conn.cursor(row_factory=tuple_row)
                await named_cur.execute(queries["job_fetch_available_fair" + routed], {
                    **claim, "fair_key": named, "limit": [asked[k] for k in named],
                    "priority": priority, "start": start, "weight": weight})
            if PLAIN in asked:
                (start_plain,), (weight_plain,) = plan.starts([PLAIN])
                plain_cur = conn.cursor(row_factory=tuple_row)
                await plain_cur.execute(queries["job_fetch_available_fair_plain" + routed], {
                    **claim, "priority": priority, "limit": asked[PLAIN],
                    "start": start_plain, "weight": weight_plain})
    if step is None:
        return [], False
    got: dict[str, list[Any]] = {}
    if named_cur is not None:
        got.update(rows_by_key(sorted(await named_cur.fetchall(), key=_claim_order),
                               _FAIR_KEY))
    if plain_cur is not None:
        got[PLAIN] = sorted(await plain_cur.fetchall(), key=_claim_order)
    short = plan.served(asked, got)
    dry.update(k for k, n in asked.items() if len(got.get(k, [])) < n)
    return plan.rows(), short
