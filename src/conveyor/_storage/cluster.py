"""Storage for the cluster's shared state, dialect-neutral: worker nodes, queue
settings, leadership, schedules, rate and concurrency limits, queue cool-downs and
metrics. Every method is one named statement of ``<dialect>/sql/``; the backends
inherit it through ``CompositionStorage``."""

from __future__ import annotations

import dataclasses
from datetime import datetime

from .base import BaseStorage, Row
from .control_types import (
    LeaderResignParams,
    LeaderRow,
    NodeRow,
    NodeUpsertParams,
    QueueRow,
    QueueUpdateParams,
    ScheduleAdvanceParams,
    ScheduleRow,
    ScheduleSetPausedParams,
    ScheduleUpsertParams,
)
from .cooldown_types import QueueCooldownRaiseParams, QueueCooldownRow
from .limiter_types import LimiterDeclareParams, LimiterHolder, LimiterRow, LimiterSlotParams
from .metric_types import (
    DepthPoint,
    MetricPoint,
    MetricsSeriesParams,
    MetricTotal,
)
from .rows import leader_row, node_row, queue_row, schedule_row, ts


class ClusterStorage(BaseStorage):
    """Nodes, queues, leadership, schedules, limits, cool-downs, metrics; see ``Storage``."""

    # -- nodes, queues, leadership, schedules, limits -------------------------------------

    async def node_upsert(self, params: NodeUpsertParams) -> None:
        values = dataclasses.asdict(params)
        values["queues"] = values.pop("queues_json")
        values["tasks"] = values.pop("tasks_json")
        values["labels"] = values.pop("labels_json")
        values["serves"] = values.pop("serves_json")
        await self._write("node_upsert", values)

    async def node_delete(self, node_id: str) -> None:
        await self._write("node_delete", {"id": node_id})

    async def node_list(self, *, live_within: float | None = None) -> list[NodeRow]:
        rows = await self._read("node_list", {"live_within": live_within})
        return [node_row(r, self.json_text) for r in rows]

    async def clock_now(self) -> datetime:
        now = ts((await self._read("clock_now", {}))[0]["now"])
        assert now is not None
        return now

    async def queue_list(self) -> list[QueueRow]:
        return [queue_row(r) for r in await self._read("queue_list", {})]

    async def queue_update(self, params: QueueUpdateParams) -> None:
        await self._write("queue_update", dataclasses.asdict(params))

    async def leader_get(self, *, name: str = "leader") -> LeaderRow | None:
        rows = await self._read("leader_get", {"name": name})
        return leader_row(rows[0]) if rows else None

    async def leader_resign(self, params: LeaderResignParams) -> None:
        await self._write("leader_resign", dataclasses.asdict(params))

    async def schedule_upsert(self, params: ScheduleUpsertParams) -> None:
        values = dataclasses.asdict(params)
        values["args"], values["kwargs"] = values.pop("args_json"), values.pop("kwargs_json")
        await self._write("schedule_upsert", values)

    async def schedule_list(self) -> list[ScheduleRow]:
        return [schedule_row(r, self.json_text) for r in await self._read("schedule_list", {})]

    async def schedule_set_paused(self, params: ScheduleSetPausedParams) -> bool:
        return bool(await self._write("schedule_set_paused", dataclasses.asdict(params)))

    async def schedule_advance(self, params: ScheduleAdvanceParams) -> None:
        values = {"name": params.name, "tick": self._time(params.tick), "job_id": params.job_id}
        await self._write("schedule_advance", values)

    async def schedule_delete(self, name: str) -> bool:
        return bool(await self._write("schedule_delete", {"name": name}))

    async def rate_limit_get(self, key: str) -> float | None:
        rows = await self._read("rate_limit_get", {"key": key})
        return float(rows[0]["tat"]) if rows else None

    async def job_concurrency_holders(self, key: str) -> list[int]:
        return [r["id"] for r in await self._read("concurrency_holders", {"key": key})]

    # -- queue cool-downs (Throttle(scope="queue")) ---------------------------------------

    async def queue_cooldown_raise(self, params: QueueCooldownRaiseParams) -> QueueCooldownRow:
        rows = await self._write("queue_cooldown_raise", {
            "queue": params.queue, "seconds": float(params.seconds), "cap": float(params.cap)})
        return _cooldown_row(rows[0])

    async def queue_cooldown_list(self) -> list[QueueCooldownRow]:
        return [_cooldown_row(r) for r in await self._read("queue_cooldown_list", {})]

    async def queue_cooldown_clear(self, queue: str) -> bool:
        return bool(await self._write("queue_cooldown_clear", {"queue": queue}))

    # -- limiters (app.limiter; <dialect>/sql/limiters.sql) --------------------------------

    async def limiter_declare(self, params: LimiterDeclareParams) -> None:
        await self._write("limiter_declare", dataclasses.asdict(params))

    async def limiter_slot_acquire(self, params: LimiterSlotParams) -> bool:
        """One statement in SQLite's write transaction (PostgreSQL locks first)."""
        return bool(await self._write("limiter_slot_take", _slot_values(params)))

    async def limiter_slot_renew(self, params: LimiterSlotParams) -> bool:
        return bool(await self._write("limiter_slot_renew", _slot_values(params)))

    async def limiter_slot_release(self, params: LimiterSlotParams) -> bool:
        return bool(await self._write("limiter_slot_release", _slot_values(params)))

    async def limiter_list(self) -> list[LimiterRow]:
        holders: dict[str, list[LimiterHolder]] = {}
        for r in await self._read("limiter_holder_list", {}):
            acquired, expires = ts(r["acquired_at"]), ts(r["lease_expires_at"])
            assert acquired is not None and expires is not None
            holders.setdefault(r["name"], []).append(LimiterHolder(
                r["name"], r["key"], r["holder"], acquired, expires, float(r["remaining"])))
        rows = []
        for r in await self._read("limiter_declared_list", {}):
            updated = ts(r["updated_at"])
            assert updated is not None
            rows.append(LimiterRow(r["name"], r["rate"], r["concurrency"], float(r["lease"]),
                                   updated, tuple(holders.get(r["name"], ()))))
        return rows

    # -- metrics -----------------------------------------------------------------------------

    async def metrics_series(self, params: MetricsSeriesParams) -> list[MetricPoint]:
        rows = await self._read("metrics_series", {
            "since": params.since, "queue": params.queue, "task": params.task,
            "step": params.step, "merged": params.merged})
        return [MetricPoint(float(r["bucket"]), r["queue"], r["metric"], float(r["value"]))
                for r in rows]

    async def metrics_totals(self) -> list[MetricTotal]:
        rows = await self._read("metrics_totals", {})
        return [MetricTotal(r["queue"], r["task"], r["metric"], float(r["value"])) for r in rows]

    async def metrics_depth_sample(self, bucket: float) -> None:
        await self._write("metrics_depth_sample", {"bucket": bucket})

    async def metrics_depth_series(self, params: MetricsSeriesParams) -> list[DepthPoint]:
        rows = await self._read("metrics_depth_series", {
            "since": params.since, "queue": params.queue, "step": params.step})
        return [DepthPoint(float(r["bucket"]), r["queue"], r["state"], int(r["n"])) for r in rows]


def _slot_values(params: LimiterSlotParams) -> dict[str, object]:
    return {"name": params.name, "key": params.key, "holder": params.holder,
            "limit": params.limit, "lease": float(params.lease)}


def _cooldown_row(r: Row) -> QueueCooldownRow:
    until, raised = ts(r["cool_until"]), ts(r["raised_at"])
    assert until is not None and raised is not None
    return QueueCooldownRow(queue=r["queue"], cool_until=until, seconds=float(r["seconds"]),
                            streak=int(r["streak"]), raised_at=raised,
                            remaining=float(r["remaining"]))
