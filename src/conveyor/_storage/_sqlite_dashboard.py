"""Dashboard and metric queries on SQLite (``sql/sqlite/dashboard.sql``, ``metrics.sql``).

A mixin of SQLiteStorage: reads are one hop to the storage thread, writes one
BEGIN IMMEDIATE transaction there. The health check opens its own read-only
connection, so a database file that went away shows, where the storage's open
connection would still read the unlinked file.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

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
from ._rows import _ts, job_from_row

if TYPE_CHECKING:
    from ._sqlite import SQLiteConfig
    from ._wake import WakeHub

T = TypeVar("T")
Conn = sqlite3.Connection


def filter_values(f: JobFilter) -> dict[str, Any]:
    """A JobFilter as this dialect's parameters: lists become ',a,b,' and JSON text."""
    return {
        "states": "," + ",".join(s.value for s in f.states) + "," if f.states else None,
        "queue": f.queue,
        "task": f.task,
        "tag": f.tag,
        "text": f.text or None,
        "error_key": f.error_key,
        "ids": json.dumps(list(f.ids)) if f.ids else None,
        "min_id": f.min_id,
    }


class SQLiteDashboardMixin:
    _q: dict[str, str]
    _config: SQLiteConfig
    _hub: WakeHub

    async def _call(self, fn: Callable[[Conn], T]) -> T:
        raise NotImplementedError

    def _write(self, conn: Conn, fn: Callable[[Conn], T]) -> T:
        raise NotImplementedError

    async def _read(self, name: str, values: dict[str, Any]) -> list[Any]:
        return await self._call(lambda c: c.execute(self._q[name], values).fetchall())

    async def _update(self, name: str, values: dict[str, Any]) -> list[Any]:
        return await self._call(
            lambda c: self._write(c, lambda c2: c2.execute(self._q[name], values).fetchall())
        )

    # -- jobs ---------------------------------------------------------------------------

    async def job_search(self, params: JobSearchParams) -> list[Job]:
        values = {**filter_values(params.filter), "limit": params.limit,
                  "before_id": params.before_id, "after_id": params.after_id}
        newer = params.after_id is not None
        rows = await self._read("job_search_newer" if newer else "job_search", values)
        jobs = [job_from_row(r, json_text=True) for r in rows]
        return jobs[::-1] if newer else jobs

    async def job_count_capped(self, params: JobCountCappedParams) -> int:
        values = {**filter_values(params.filter), "cap": params.cap}
        return int((await self._read("job_count_capped", values))[0]["n"])

    async def job_count_by_queue(self, params: JobCountByQueueParams) -> list[StateCount]:
        def run(c: Conn) -> list[StateCount]:
            active = c.execute(self._q["job_count_by_queue"]).fetchall()
            final = c.execute(self._q["job_count_final_capped"], {"cap": params.final_cap})
            counts = [StateCount(r["queue"], JobState(r["state"]), int(r["n"])) for r in active]
            counts += [StateCount(None, JobState(r["state"]), int(r["n"]),
                                  int(r["n"]) >= params.final_cap) for r in final.fetchall()]
            return counts

        return await self._call(run)

    async def job_failure_groups(self, params: JobFailureGroupsParams) -> list[FailureGroup]:
        values = {"queue": params.queue, "task": params.task, "limit": params.limit,
                  "scan": params.scan}
        return [
            FailureGroup(r["task"], r["error"], int(r["retryable"]), int(r["discarded"]),
                         int(r["last_id"]), _ts(r["last_at"]))
            for r in await self._read("job_failure_groups", values)
        ]

    async def _bulk(self, params: JobBulkParams, allowed: tuple[JobState, ...], update: str,
                    extra: dict[str, Any]) -> list[JobChanged]:
        """Pick the matching jobs and change them, in one transaction."""
        values = {**filter_values(params.filter), "limit": params.limit,
                  "allowed": "," + ",".join(s.value for s in allowed) + ","}

        def run(c: Conn) -> list[JobChanged]:
            picked = c.execute(self._q["job_pick_matching"], values).fetchall()
            if not picked:
                return []
            ids = json.dumps([r["id"] for r in picked])
            done = {r["id"] for r in c.execute(self._q[update], {"ids": ids, **extra})}
            return [JobChanged(r["id"], r["task"], r["queue"], r["attempt"], JobState(r["state"]))
                    for r in picked if r["id"] in done]

        return await self._call(lambda c: self._write(c, run))

    async def job_retry_matching(self, params: JobBulkParams) -> list[JobChanged]:
        changed = await self._bulk(params, RETRYABLE_FROM, "job_retry_ids", {})
        for queue in {c.queue for c in changed}:
            self._hub.notify(queue)
        return changed

    async def job_discard_matching(self, params: JobBulkParams) -> list[JobChanged]:
        return await self._bulk(params, DISCARDABLE_FROM, "job_discard_ids",
                                {"error": params.error_json})

    async def job_count_running_by_node(self) -> dict[str, int]:
        rows = await self._read("job_count_running_by_node", {})
        return {r["node"]: int(r["n"]) for r in rows if r["node"] is not None}

    async def db_health(self, params: DbHealthParams) -> DbHealth:
        latest = len(load_migrations("sqlite"))
        sql = self._q["schema_version"]

        def probe() -> int:
            uri = f"file:{quote(self._config.path, safe='/')}?mode=ro"
            conn = sqlite3.connect(uri, uri=True, timeout=params.timeout)
            try:
                return int(conn.execute(sql).fetchone()[0])
            finally:
                conn.close()

        try:
            version = await asyncio.wait_for(asyncio.to_thread(probe), params.timeout)
        except (sqlite3.Error, TimeoutError) as exc:
            return DbHealth(False, None, latest, f"{type(exc).__name__}: {exc}")
        return DbHealth(True, version, latest)

    # -- metrics --------------------------------------------------------------------------

    async def metrics_add(self, params: MetricsAddParams) -> None:
        minute = [{"bucket": r.bucket, "queue": r.queue, "task": r.task, "metric": r.metric,
                   "value": r.value} for r in params.rows if r.bucket is not None]
        total = [{"queue": r.queue, "task": r.task, "metric": r.metric, "value": r.value}
                 for r in params.rows if r.bucket is None]

        def run(c: Conn) -> None:
            c.executemany(self._q["metrics_add"], minute)
            c.executemany(self._q["metrics_total_add"], total)

        await self._call(lambda c: self._write(c, run))

    async def metrics_series(self, params: MetricsSeriesParams) -> list[MetricPoint]:
        rows = await self._read("metrics_series", {"since": params.since, "queue": params.queue})
        return [MetricPoint(float(r["bucket"]), r["queue"], r["metric"], float(r["value"]))
                for r in rows]

    async def metrics_totals(self) -> list[MetricTotal]:
        rows = await self._read("metrics_totals", {})
        return [MetricTotal(r["queue"], r["task"], r["metric"], float(r["value"])) for r in rows]

    async def metrics_depth_sample(self, params: MetricsDepthSampleParams) -> None:
        await self._update("metrics_depth_sample", {"bucket": params.bucket})

    async def metrics_depth_series(self, params: MetricsSeriesParams) -> list[DepthPoint]:
        rows = await self._read("metrics_depth_series", {"since": params.since})
        return [DepthPoint(float(r["bucket"]), r["queue"], r["state"], int(r["n"])) for r in rows]

    async def metrics_prune(self, params: MetricsPruneParams) -> int:
        def run(c: Conn) -> int:
            values = {"before": params.before}
            n = c.execute(self._q["metrics_prune"], values).rowcount
            return n + c.execute(self._q["metrics_depth_prune"], values).rowcount

        return await self._call(lambda c: self._write(c, run))
