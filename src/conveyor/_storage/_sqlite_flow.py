"""Flow control on SQLite: queues, nodes, leadership, schedules, limits and pruning.

A mixin of SQLiteStorage: every method is one hop to the storage thread, and writes
run in one BEGIN IMMEDIATE transaction, which also serialises limit checks across
processes sharing the file.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

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
from ._rows import _ts

T = TypeVar("T")
Conn = sqlite3.Connection


class SQLiteFlowMixin:
    _q: dict[str, str]

    async def _call(self, fn: Callable[[Conn], T]) -> T:
        raise NotImplementedError

    def _write(self, conn: Conn, fn: Callable[[Conn], T]) -> T:
        raise NotImplementedError

    async def _writing(self, fn: Callable[[Conn], T]) -> T:
        return await self._call(lambda c: self._write(c, fn))

    async def _rows(self, name: str, values: dict[str, Any] | None = None) -> list[Any]:
        return await self._call(lambda c: c.execute(self._q[name], values or {}).fetchall())

    async def clock_now(self) -> datetime:
        rows = await self._rows("clock_now")
        now = _ts(rows[0]["now"])
        assert now is not None
        return now

    async def queue_list(self) -> list[QueueRow]:
        return [queue_row(r) for r in await self._rows("queue_list")]

    async def queue_update(self, params: QueueUpdateParams) -> None:
        values = dataclasses.asdict(params)
        await self._writing(lambda c: c.execute(self._q["queue_update"], values))

    async def node_list(self, params: NodeListParams) -> list[NodeRow]:
        rows = await self._rows("node_list", {"live_within": params.live_within})
        return [node_row(r, json_text=True) for r in rows]

    async def leader_elect(self, params: LeaderElectParams) -> LeaderRow | None:
        def run(c: Conn) -> Any:
            c.execute(self._q["leader_elect"], dataclasses.asdict(params))
            return c.execute(self._q["leader_get"], {"name": params.name}).fetchone()

        row = await self._writing(run)
        return leader_row(row) if row is not None else None

    async def leader_get(self, params: LeaderGetParams) -> LeaderRow | None:
        rows = await self._rows("leader_get", {"name": params.name})
        return leader_row(rows[0]) if rows else None

    async def leader_resign(self, params: LeaderResignParams) -> None:
        values = dataclasses.asdict(params)
        await self._writing(lambda c: c.execute(self._q["leader_resign"], values))

    async def schedule_upsert(self, params: ScheduleUpsertParams) -> None:
        values = dataclasses.asdict(params)
        values["args"], values["kwargs"] = values.pop("args_json"), values.pop("kwargs_json")
        await self._writing(lambda c: c.execute(self._q["schedule_upsert"], values))

    async def schedule_list(self) -> list[ScheduleRow]:
        return [schedule_row(r, json_text=True) for r in await self._rows("schedule_list")]

    async def schedule_set_paused(self, params: ScheduleSetPausedParams) -> bool:
        values = {"name": params.name, "paused": int(params.paused)}
        rows = await self._writing(
            lambda c: c.execute(self._q["schedule_set_paused"], values).fetchall()
        )
        return bool(rows)

    async def schedule_advance(self, params: ScheduleAdvanceParams) -> None:
        values = {"name": params.name, "tick": params.tick.timestamp(), "job_id": params.job_id}
        await self._writing(lambda c: c.execute(self._q["schedule_advance"], values))

    async def schedule_delete(self, params: ScheduleDeleteParams) -> bool:
        rows = await self._writing(
            lambda c: c.execute(self._q["schedule_delete"], {"name": params.name}).fetchall()
        )
        return bool(rows)

    async def rate_limit_acquire(self, params: RateLimitAcquireParams) -> list[RateGrant]:
        def run(c: Conn) -> list[RateGrant]:
            now = c.execute(self._q["clock_now"]).fetchone()["now"]
            grants = []
            for request in params.requests:
                row = c.execute(self._q["rate_limit_lock"], {"key": request.key}).fetchone()
                granted, tat, wait = gcra(row["tat"] if row else None, now, request)
                if granted:
                    c.execute(self._q["rate_limit_set"], {"key": request.key, "tat": tat})
                grants.append(RateGrant(granted, wait))
            return grants

        return await self._writing(run)

    async def rate_limit_get(self, params: RateLimitGetParams) -> float | None:
        rows = await self._rows("rate_limit_get", {"key": params.key})
        return float(rows[0]["tat"]) if rows else None

    async def job_concurrency_acquire(self, params: ConcurrencyAcquireParams) -> frozenset[int]:
        def run(c: Conn) -> frozenset[int]:
            granted: set[int] = set()
            for group in sorted(params.groups, key=lambda g: g.key):
                c.execute(self._q["concurrency_lock"], {"key": group.key})
                held = c.execute(self._q["concurrency_count"], {"key": group.key}).fetchone()["n"]
                for job_id, token in group.leases[: max(group.limit - held, 0)]:
                    row = c.execute(
                        self._q["concurrency_grant"], {"id": job_id, "lease_token": token}
                    ).fetchone()
                    if row is not None:
                        granted.add(job_id)
            return frozenset(granted)

        return await self._writing(run)

    async def job_concurrency_holders(self, params: ConcurrencyHoldersParams) -> list[int]:
        return [r["id"] for r in await self._rows("concurrency_holders", {"key": params.key})]

    async def job_count_ahead(self, params: JobCountAheadParams) -> int:
        return int((await self._rows("job_count_ahead", {"id": params.id}))[0]["n"])

    async def job_prune(self, params: JobPruneParams) -> int:
        def run(c: Conn) -> int:
            deleted = c.execute(self._q["job_prune"], {
                "completed_age": params.completed_age, "discarded_age": params.discarded_age,
                "limit": params.limit,
            }).fetchall()
            c.execute(self._q["node_prune"], {"age": params.node_age})
            c.execute(self._q["rate_limit_prune"], {"age": params.node_age})
            return len(deleted)

        return await self._writing(run)
