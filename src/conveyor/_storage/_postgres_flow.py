"""Flow control on PostgreSQL: queues, nodes, leadership, schedules, limits, pruning.

A mixin of PostgresStorage. Limit checks run in one transaction that locks what they
count (a row lock on a rate budget, an advisory lock per concurrency key), so any
number of processes together never exceed a limit.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import DictRow

from ._flow_rows import leader_row, node_row, queue_row, schedule_row
from ._flow_types import (
    ConcurrencyAcquireParams,
    ConcurrencyHoldersParams,
    JobCountAheadParams,
    JobPruneParams,
    LeaderElectParams,
    LeaderGetParams,
    LeaderResignParams,
    LeaderRow,
    NodeListParams,
    NodeRow,
    QueueRow,
    QueueUpdateParams,
    RateGrant,
    RateLimitAcquireParams,
    RateLimitGetParams,
    ScheduleAdvanceParams,
    ScheduleDeleteParams,
    ScheduleRow,
    ScheduleSetPausedParams,
    ScheduleUpsertParams,
    gcra,
)

Conn = psycopg.AsyncConnection[DictRow]


class PostgresFlowMixin:
    _q: dict[str, str]

    async def _fetch(
        self, name: str, values: Mapping[str, Any], prepare: bool | None = None
    ) -> list[DictRow]:
        raise NotImplementedError

    def _conn(self, reserved: bool = False) -> contextlib.AbstractAsyncContextManager[Conn]:
        raise NotImplementedError

    @contextlib.asynccontextmanager
    async def _transaction(self, reserved: bool = False) -> AsyncIterator[Conn]:
        async with self._conn(reserved) as conn, conn.transaction():
            yield conn

    async def _exec(self, conn: Conn, name: str, values: Mapping[str, Any]) -> list[DictRow]:
        cur = await conn.execute(self._q[name], values)
        return await cur.fetchall() if cur.description else []

    async def clock_now(self) -> datetime:
        now: datetime = (await self._fetch("clock_now", {}))[0]["now"]
        return now

    async def queue_list(self) -> list[QueueRow]:
        return [queue_row(r) for r in await self._fetch("queue_list", {})]

    async def queue_update(self, params: QueueUpdateParams) -> None:
        await self._fetch("queue_update", dataclasses.asdict(params))

    async def node_list(self, params: NodeListParams) -> list[NodeRow]:
        rows = await self._fetch("node_list", {"live_within": params.live_within}, prepare=False)
        return [node_row(r, json_text=False) for r in rows]

    async def leader_elect(self, params: LeaderElectParams) -> LeaderRow | None:
        # Reserved connections: handlers hogging the pool must not cost the leadership.
        async with self._transaction(reserved=True) as conn:
            await self._exec(conn, "leader_elect", dataclasses.asdict(params))
            rows = await self._exec(conn, "leader_get", {"name": params.name})
        return leader_row(rows[0]) if rows else None

    async def leader_get(self, params: LeaderGetParams) -> LeaderRow | None:
        rows = await self._fetch("leader_get", {"name": params.name})
        return leader_row(rows[0]) if rows else None

    async def leader_resign(self, params: LeaderResignParams) -> None:
        await self._fetch("leader_resign", dataclasses.asdict(params))

    async def schedule_upsert(self, params: ScheduleUpsertParams) -> None:
        values = dataclasses.asdict(params)
        values["args"], values["kwargs"] = values.pop("args_json"), values.pop("kwargs_json")
        await self._fetch("schedule_upsert", values)

    async def schedule_list(self) -> list[ScheduleRow]:
        return [schedule_row(r, json_text=False) for r in await self._fetch("schedule_list", {})]

    async def schedule_set_paused(self, params: ScheduleSetPausedParams) -> bool:
        return bool(await self._fetch("schedule_set_paused", dataclasses.asdict(params)))

    async def schedule_advance(self, params: ScheduleAdvanceParams) -> None:
        await self._fetch("schedule_advance", dataclasses.asdict(params))

    async def schedule_delete(self, params: ScheduleDeleteParams) -> bool:
        return bool(await self._fetch("schedule_delete", {"name": params.name}))

    async def rate_limit_acquire(self, params: RateLimitAcquireParams) -> list[RateGrant]:
        grants: dict[int, RateGrant] = {}
        async with self._transaction() as conn:
            now = (await self._exec(conn, "clock_now", {}))[0]["now"].timestamp()
            # A fixed lock order: two processes never wait on each other's keys in a cycle.
            order = sorted(range(len(params.requests)), key=lambda i: params.requests[i].key)
            for i in order:
                request = params.requests[i]
                tat = (await self._exec(conn, "rate_limit_lock", {"key": request.key}))[0]["tat"]
                granted, new_tat, wait = gcra(tat, now, request)
                if granted:
                    await self._exec(conn, "rate_limit_set", {"key": request.key, "tat": new_tat})
                grants[i] = RateGrant(granted, wait)
        return [grants[i] for i in range(len(params.requests))]

    async def rate_limit_get(self, params: RateLimitGetParams) -> float | None:
        rows = await self._fetch("rate_limit_get", {"key": params.key})
        return float(rows[0]["tat"]) if rows else None

    async def job_concurrency_acquire(self, params: ConcurrencyAcquireParams) -> frozenset[int]:
        granted: set[int] = set()
        async with self._transaction() as conn:
            for group in sorted(params.groups, key=lambda g: g.key):
                await self._exec(conn, "concurrency_lock", {"key": group.key})
                held = (await self._exec(conn, "concurrency_count", {"key": group.key}))[0]["n"]
                for job_id, token in group.leases[: max(group.limit - held, 0)]:
                    rows = await self._exec(
                        conn, "concurrency_grant", {"id": job_id, "lease_token": token}
                    )
                    granted.update(r["id"] for r in rows)
        return frozenset(granted)

    async def job_concurrency_holders(self, params: ConcurrencyHoldersParams) -> list[int]:
        return [r["id"] for r in await self._fetch("concurrency_holders", {"key": params.key})]

    async def job_count_ahead(self, params: JobCountAheadParams) -> int:
        return int((await self._fetch("job_count_ahead", {"id": params.id}))[0]["n"])

    async def job_prune(self, params: JobPruneParams) -> int:
        deleted = await self._fetch("job_prune", {
            "completed_age": params.completed_age, "discarded_age": params.discarded_age,
            "limit": params.limit,
        })
        await self._fetch("node_prune", {"age": params.node_age})
        await self._fetch("rate_limit_prune", {"age": params.node_age})
        return len(deleted)
