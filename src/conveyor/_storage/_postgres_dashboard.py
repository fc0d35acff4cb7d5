"""Dashboard and metric queries on PostgreSQL (``sql/postgres/dashboard.sql``,
``metrics.sql``).

A mixin of PostgresStorage. Filtered reads run unprepared: a generic plan for
``x IS NULL OR col = x`` could not pick an index. The health check opens its own
connection, so it answers quickly (and truthfully) while the pool would wait.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import DictRow

from .._errors import DatabaseUnavailableError
from .._job import Job, JobState
from ._dashboard_types import (
    DISCARDABLE_FROM,
    RETRYABLE_FROM,
    DbHealth,
    DbHealthParams,
    DepthPoint,
    FailureGroup,
    JobBulkParams,
    JobChanged,
    JobCountByQueueParams,
    JobCountCappedParams,
    JobFailureGroupsParams,
    JobFilter,
    JobSearchParams,
    MetricPoint,
    MetricsAddParams,
    MetricsDepthSampleParams,
    MetricsPruneParams,
    MetricsSeriesParams,
    MetricTotal,
    StateCount,
)
from ._queries import load_migrations
from ._rows import job_from_row

if TYPE_CHECKING:
    from ._postgres import PostgresConfig

Conn = psycopg.AsyncConnection[DictRow]


def filter_values(f: JobFilter) -> dict[str, Any]:
    return {
        "states": [s.value for s in f.states] or None,
        "queue": f.queue,
        "task": f.task,
        "tag": f.tag,
        "text": f.text or None,
        "error_key": f.error_key,
        "ids": list(f.ids) or None,
        "min_id": f.min_id,
    }


class PostgresDashboardMixin:
    _q: dict[str, str]
    _config: PostgresConfig

    async def _fetch(
        self, name: str, values: Mapping[str, Any], prepare: bool | None = None
    ) -> list[DictRow]:
        raise NotImplementedError

    def _conn(self) -> contextlib.AbstractAsyncContextManager[Conn]:
        raise NotImplementedError

    def _connect_kwargs(self) -> dict[str, Any]:
        raise NotImplementedError

    def _unavailable(self, exc: BaseException) -> DatabaseUnavailableError:
        raise NotImplementedError

    async def _read(self, name: str, values: Mapping[str, Any]) -> list[DictRow]:
        return await self._fetch(name, values, prepare=False)

    # -- jobs ---------------------------------------------------------------------------

    async def job_search(self, params: JobSearchParams) -> list[Job]:
        values = {**filter_values(params.filter), "limit": params.limit,
                  "before_id": params.before_id, "after_id": params.after_id}
        newer = params.after_id is not None
        rows = await self._read("job_search_newer" if newer else "job_search", values)
        jobs = [job_from_row(r, json_text=False) for r in rows]
        return jobs[::-1] if newer else jobs

    async def job_count_capped(self, params: JobCountCappedParams) -> int:
        values = {**filter_values(params.filter), "cap": params.cap}
        return int((await self._read("job_count_capped", values))[0]["n"])

    async def job_count_by_queue(self, params: JobCountByQueueParams) -> list[StateCount]:
        active = await self._read("job_count_by_queue", {})
        final = await self._read("job_count_final_capped", {"cap": params.final_cap})
        counts = [StateCount(r["queue"], JobState(r["state"]), int(r["n"])) for r in active]
        counts += [StateCount(None, JobState(r["state"]), int(r["n"]),
                              int(r["n"]) >= params.final_cap) for r in final]
        return counts

    async def job_failure_groups(self, params: JobFailureGroupsParams) -> list[FailureGroup]:
        values = {"queue": params.queue, "task": params.task, "limit": params.limit,
                  "scan": params.scan}
        return [
            FailureGroup(r["task"], r["error"], int(r["retryable"]), int(r["discarded"]),
                         int(r["last_id"]), r["last_at"])
            for r in await self._read("job_failure_groups", values)
        ]

    async def _bulk(self, params: JobBulkParams, allowed: tuple[JobState, ...], update: str,
                    extra: dict[str, Any]) -> list[JobChanged]:
        """Lock the matching jobs (skipping locked ones) and change them, in one
        transaction."""
        values = {**filter_values(params.filter), "limit": params.limit,
                  "allowed": [s.value for s in allowed]}
        async with self._conn() as conn, conn.transaction():
            cur = await conn.execute(self._q["job_pick_matching"], values, prepare=False)
            picked = await cur.fetchall()
            if not picked:
                return []
            cur = await conn.execute(self._q[update], {
                "ids": [r["id"] for r in picked], "channel": self._config.channel, **extra})
            done = {r["id"] for r in await cur.fetchall()}
        return [JobChanged(r["id"], r["task"], r["queue"], r["attempt"], JobState(r["state"]))
                for r in picked if r["id"] in done]

    async def job_retry_matching(self, params: JobBulkParams) -> list[JobChanged]:
        return await self._bulk(params, RETRYABLE_FROM, "job_retry_ids", {})

    async def job_discard_matching(self, params: JobBulkParams) -> list[JobChanged]:
        return await self._bulk(params, DISCARDABLE_FROM, "job_discard_ids",
                                {"error": params.error_json})

    async def job_count_running_by_node(self) -> dict[str, int]:
        rows = await self._read("job_count_running_by_node", {})
        return {r["node"]: int(r["n"]) for r in rows if r["node"] is not None}

    async def db_health(self, params: DbHealthParams) -> DbHealth:
        latest = len(load_migrations("postgres"))
        kwargs = {**self._connect_kwargs(), "autocommit": True}
        try:
            async with asyncio.timeout(params.timeout):
                conn = await psycopg.AsyncConnection.connect(self._config.url, **kwargs)
                async with conn:
                    cur = await conn.execute(self._q["schema_version"], prepare=False)
                    row = await cur.fetchone()
        except psycopg.errors.UndefinedTable:
            return DbHealth(True, 0, latest)
        except (psycopg.Error, TimeoutError, OSError) as exc:
            return DbHealth(False, None, latest, str(self._unavailable(exc)))
        return DbHealth(True, int(row[0]) if row is not None else 0, latest)

    # -- metrics --------------------------------------------------------------------------

    async def metrics_add(self, params: MetricsAddParams) -> None:
        minute = [r for r in params.rows if r.bucket is not None]
        total = [r for r in params.rows if r.bucket is None]
        async with self._conn() as conn, conn.transaction():
            if minute:
                await conn.execute(self._q["metrics_add"], {
                    "bucket": [r.bucket for r in minute], "queue": [r.queue for r in minute],
                    "task": [r.task for r in minute], "metric": [r.metric for r in minute],
                    "value": [float(r.value) for r in minute],
                })
            if total:
                await conn.execute(self._q["metrics_total_add"], {
                    "queue": [r.queue for r in total], "task": [r.task for r in total],
                    "metric": [r.metric for r in total], "value": [float(r.value) for r in total],
                })

    async def metrics_series(self, params: MetricsSeriesParams) -> list[MetricPoint]:
        rows = await self._read("metrics_series", {"since": params.since, "queue": params.queue})
        return [MetricPoint(float(r["bucket"]), r["queue"], r["metric"], float(r["value"]))
                for r in rows]

    async def metrics_totals(self) -> list[MetricTotal]:
        rows = await self._read("metrics_totals", {})
        return [MetricTotal(r["queue"], r["task"], r["metric"], float(r["value"])) for r in rows]

    async def metrics_depth_sample(self, params: MetricsDepthSampleParams) -> None:
        async with self._conn() as conn:
            await conn.execute(self._q["metrics_depth_sample"], {"bucket": params.bucket},
                               prepare=False)

    async def metrics_depth_series(self, params: MetricsSeriesParams) -> list[DepthPoint]:
        rows = await self._read("metrics_depth_series", {"since": params.since})
        return [DepthPoint(float(r["bucket"]), r["queue"], r["state"], int(r["n"])) for r in rows]

    async def metrics_prune(self, params: MetricsPruneParams) -> int:
        async with self._conn() as conn, conn.transaction():
            values = {"before": params.before}
            first = await conn.execute(self._q["metrics_prune"], values)
            second = await conn.execute(self._q["metrics_depth_prune"], values)
            return max(first.rowcount, 0) + max(second.rowcount, 0)
