"""What every backend shares: the Storage methods that are one statement with the same
parameters and the same decoding on any database, written once.

A backend subclasses ``BaseStorage`` and supplies its connection handling through four
small methods (``_read``, ``_write``, ``_filter_values``, ``_change_matching``) and a
few class constants, then writes only what truly differs: opening, migrating, the batch
paths (insert, claim, ack, heartbeat) and the calls that need a transaction of several
statements. The unique-insert merge lives in ``unique.py``, the migration check in
``schema.py`` and row decoding in ``rows.py``, each used by both backends.
"""

from __future__ import annotations

import dataclasses
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar

from .._errors import unique_held
from .._job import DISCARDABLE_FROM, RETRYABLE_FROM, STAGED_STATES, Job, JobState
from .clock import testing_queries, virtual_queries
from .control_types import (
    ConcurrencyHoldersParams,
    JobCountAheadParams,
    JobPruneParams,
    LeaderGetParams,
    LeaderResignParams,
    LeaderRow,
    NodeDeleteParams,
    NodeListParams,
    NodeRow,
    NodeUpsertParams,
    QueueRow,
    QueueUpdateParams,
    RateLimitGetParams,
    ScheduleAdvanceParams,
    ScheduleDeleteParams,
    ScheduleRow,
    ScheduleSetPausedParams,
    ScheduleUpsertParams,
)
from .cooldown_types import QueueCooldownClearParams, QueueCooldownRaiseParams, QueueCooldownRow
from .job_types import (
    FailureGroup,
    JobBulkParams,
    JobCancelParams,
    JobChanged,
    JobClaimOneParams,
    JobCountByQueueParams,
    JobCountByStateParams,
    JobCountCappedParams,
    JobFailureGroupsParams,
    JobFilter,
    JobGetParams,
    JobListParams,
    JobPurgeBatch,
    JobPurgeCount,
    JobPurgeParams,
    JobRescueExpiredParams,
    JobRetryParams,
    JobSearchParams,
    JobStageDueParams,
    JobStageEarlyParams,
    StagedJob,
    StateCount,
)
from .metric_types import (
    DepthPoint,
    MetricPoint,
    MetricsDepthSampleParams,
    MetricsSeriesParams,
    MetricTotal,
)
from .protocol import Capabilities
from .rows import job_from_row, leader_row, node_row, queue_row, schedule_row, ts
from .schema import load_queries
from .wake import WakeCallback, WakeHub

#: A database row read by column name (``sqlite3.Row`` or a psycopg dict row).
Row = Any


class BaseStorage(ABC):
    """The shared half of a backend; see the module docstring for what a backend adds."""

    #: "sqlite" or "postgres": picks the SQL files and names the capabilities.
    dialect: ClassVar[str]
    #: JSON columns arrive as text (SQLite) rather than decoded by the driver.
    json_text: ClassVar[bool]
    #: True when statements do not wake other producers themselves (no NOTIFY): the
    #: storage then tells the in-process hub which queues may have ready jobs.
    wake_locally: ClassVar[bool]
    #: The driver's error for a unique index violation (another live job holds the key).
    unique_violation: ClassVar[type[Exception]]
    #: True once ``use_virtual_clock`` rewrote the statements (the testing toolkit).
    virtual_clock: bool = False

    def __init__(self, hub: WakeHub, poll_interval: float) -> None:
        self._hub = hub
        self._q = load_queries(self.dialect)
        self._capabilities = Capabilities(dialect=self.dialect, poll_interval=poll_interval)

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    # -- what a backend supplies -------------------------------------------------------

    @abstractmethod
    async def _read(self, name: str, values: Mapping[str, Any]) -> list[Row]:
        """Run one named read-only statement; its rows."""

    @abstractmethod
    async def _write(self, name: str, values: Mapping[str, Any]) -> list[Row]:
        """Run one named statement in its own write transaction; its rows."""

    @abstractmethod
    def _time(self, value: datetime) -> Any:
        """A datetime as this backend's timestamp parameter."""

    @abstractmethod
    def _filter_values(self, f: JobFilter) -> dict[str, Any]:
        """A JobFilter as this dialect's statement parameters."""

    @abstractmethod
    async def _change_matching(self, params: JobBulkParams, allowed: Sequence[JobState],
                               update: str, extra: Mapping[str, Any]) -> list[JobChanged]:
        """Pick up to ``params.limit`` jobs in ``allowed`` states matching the filter and
        apply ``update`` to them, in one transaction; the jobs it changed."""

    # -- helpers -------------------------------------------------------------------------

    def _woke(self, queues: Iterable[str]) -> None:
        """Jobs may be ready in these queues ("*": any)."""
        if self.wake_locally:
            for queue in set(queues):
                self._hub.notify(queue)

    def _jobs(self, rows: Iterable[Row]) -> list[Job]:
        return [job_from_row(r, self.json_text) for r in rows]

    def _one(self, rows: list[Row]) -> Job | None:
        return job_from_row(rows[0], self.json_text) if rows else None

    def wake_subscribe(self, callback: WakeCallback) -> Callable[[], None]:
        return self._hub.subscribe(callback)

    # -- jobs ----------------------------------------------------------------------------

    async def job_rescue_expired(self, params: JobRescueExpiredParams) -> list[int]:
        values = {"limit": params.limit, "error": params.error_json, "node_ttl": params.node_ttl}
        ids = [r["id"] for r in await self._write("job_rescue_expired", values)]
        if ids:
            self._woke(["*"])
        return ids

    async def job_stage_due(self, params: JobStageDueParams) -> list[StagedJob]:
        staged = []
        for previous in STAGED_STATES:
            values = {"limit": params.limit, "from_state": previous.value}
            for r in await self._write("job_stage_due", values):
                staged.append(StagedJob(r["id"], r["task"], r["queue"], r["attempt"], previous))
        self._woke(j.queue for j in staged)
        return staged

    async def job_get(self, params: JobGetParams) -> Job | None:
        return self._one(await self._read("job_get", {"id": params.id}))

    async def job_list(self, params: JobListParams) -> list[Job]:
        values = dataclasses.asdict(params)
        values["state"] = params.state.value if params.state else None
        return self._jobs(await self._read("job_list", values))

    async def job_retry(self, params: JobRetryParams) -> Job | None:
        try:
            job = self._one(await self._write("job_retry", {"id": params.id}))
        except self.unique_violation:  # the unique index: another live job holds the key
            raise unique_held(params.id) from None
        if job is not None:
            self._woke([job.queue])
        return job

    async def job_cancel(self, params: JobCancelParams) -> Job | None:
        return self._one(await self._write("job_cancel", {"id": params.id}))

    async def job_count_by_state(self, params: JobCountByStateParams) -> dict[str, int]:
        rows = await self._read("job_count_by_state", {"queue": params.queue})
        return {r["state"]: int(r["n"]) for r in rows}

    async def job_delete_by_queue(self, queue: str) -> int:
        return int((await self._write("job_delete_by_queue", {"queue": queue}))[0]["n"])

    async def job_count_ahead(self, params: JobCountAheadParams) -> int:
        return int((await self._read("job_count_ahead", {"id": params.id}))[0]["n"])

    async def job_prune(self, params: JobPruneParams) -> int:
        deleted = await self._write("job_prune", {
            "completed_age": params.completed_age, "discarded_age": params.discarded_age,
            "limit": params.limit, "queue": params.queue,
            "exclude": json.dumps(list(params.exclude_queues)),
        })
        await self._write("node_prune", {"age": params.node_age})
        await self._write("rate_limit_prune", {"age": params.node_age})
        return len(deleted)

    # -- maintenance: delete one job, purge many (<dialect>/sql/maintenance.sql) ---------

    async def job_delete(self, job_id: int, *, force: bool = False) -> Job | None:
        return self._one(await self._write("job_delete", {"id": job_id, "force": force}))

    def _purge_values(self, params: JobPurgeParams) -> dict[str, Any]:
        flt = self._filter_values(JobFilter(states=params.states))
        return {"states": flt["states"], "queue": params.queue, "task": params.task,
                "older_than": params.older_than, "after_id": params.after_id,
                "max_id": params.max_id, "limit": params.limit}

    async def job_purge_count(self, params: JobPurgeParams) -> JobPurgeCount:
        rows = await self._read("job_purge_count", self._purge_values(params))
        ids = [int(r["max_id"]) for r in rows if r["max_id"] is not None]
        return JobPurgeCount({JobState(r["state"]): int(r["n"]) for r in rows},
                             max(ids) if ids else None)

    async def job_purge_batch(self, params: JobPurgeParams) -> JobPurgeBatch:
        """Pick up to ``limit`` candidates with a read, then delete those that still
        match in one short write: no write lock is held while the table is read."""
        values = self._purge_values(params)
        picked = [int(r["id"]) for r in await self._read("job_purge_pick", values)]
        if not picked:
            return JobPurgeBatch([], None)
        values["ids"] = self._filter_values(JobFilter(ids=tuple(picked)))["ids"]
        rows = await self._write("job_purge_ids", values)
        deleted = changed_jobs(rows, {int(r["id"]) for r in rows})
        return JobPurgeBatch(deleted, picked[-1] if len(picked) == params.limit else None)

    async def job_prune_count(self, params: JobPruneParams) -> int:
        values = {"completed_age": params.completed_age, "discarded_age": params.discarded_age,
                  "queue": params.queue, "exclude": json.dumps(list(params.exclude_queues))}
        return int((await self._read("job_prune_count", values))[0]["n"])

    async def job_rescue_candidates(self, params: JobRescueExpiredParams) -> list[Job]:
        rows = await self._read("job_rescue_candidates",
                                {"limit": params.limit, "node_ttl": params.node_ttl})
        return sorted(self._jobs(rows), key=lambda j: j.id)

    # -- search and bulk actions -----------------------------------------------------------

    async def job_search(self, params: JobSearchParams) -> list[Job]:
        values = {**self._filter_values(params.filter), "limit": params.limit,
                  "before_id": params.before_id, "after_id": params.after_id}
        newer = params.after_id is not None
        jobs = self._jobs(await self._read("job_search_newer" if newer else "job_search", values))
        return jobs[::-1] if newer else jobs

    async def job_count_capped(self, params: JobCountCappedParams) -> int:
        values = {**self._filter_values(params.filter), "cap": params.cap}
        return int((await self._read("job_count_capped", values))[0]["n"])

    async def job_count_by_queue(self, params: JobCountByQueueParams) -> list[StateCount]:
        active = await self._read("job_count_by_queue", {})
        final = await self._read("job_count_final_capped", {"cap": params.final_cap})
        counts = [StateCount(r["queue"], JobState(r["state"]), int(r["n"])) for r in active]
        counts += [StateCount(None, JobState(r["state"]), int(r["n"]),
                              int(r["n"]) >= params.final_cap) for r in final]
        return counts

    async def job_count_final_by_queue(self) -> list[StateCount]:
        rows = await self._read("job_count_final_by_queue", {})
        return [StateCount(r["queue"], JobState(r["state"]), int(r["n"])) for r in rows]

    async def job_failure_groups(self, params: JobFailureGroupsParams) -> list[FailureGroup]:
        values = {"queue": params.queue, "task": params.task, "limit": params.limit,
                  "scan": params.scan}
        return [
            FailureGroup(r["task"], r["error"], int(r["retryable"]), int(r["discarded"]),
                         int(r["last_id"]), ts(r["last_at"]))
            for r in await self._read("job_failure_groups", values)
        ]

    async def job_retry_matching(self, params: JobBulkParams) -> list[JobChanged]:
        changed = await self._change_matching(params, RETRYABLE_FROM, "job_retry_ids", {})
        self._woke(c.queue for c in changed)
        return changed

    async def job_discard_matching(self, params: JobBulkParams) -> list[JobChanged]:
        return await self._change_matching(params, DISCARDABLE_FROM, "job_discard_ids",
                                           {"error": params.error_json})

    async def job_count_running_by_node(self) -> dict[str, int]:
        rows = await self._read("job_count_running_by_node", {})
        return {r["node"]: int(r["n"]) for r in rows if r["node"] is not None}

    # -- nodes, queues, leadership, schedules, limits -------------------------------------

    async def node_upsert(self, params: NodeUpsertParams) -> None:
        values = dataclasses.asdict(params)
        values["queues"] = values.pop("queues_json")
        values["tasks"] = values.pop("tasks_json")
        values["labels"] = values.pop("labels_json")
        await self._write("node_upsert", values)

    async def node_delete(self, params: NodeDeleteParams) -> None:
        await self._write("node_delete", {"id": params.id})

    async def node_list(self, params: NodeListParams) -> list[NodeRow]:
        rows = await self._read("node_list", {"live_within": params.live_within})
        return [node_row(r, self.json_text) for r in rows]

    async def clock_now(self) -> datetime:
        now = ts((await self._read("clock_now", {}))[0]["now"])
        assert now is not None
        return now

    async def queue_list(self) -> list[QueueRow]:
        return [queue_row(r) for r in await self._read("queue_list", {})]

    async def queue_update(self, params: QueueUpdateParams) -> None:
        await self._write("queue_update", dataclasses.asdict(params))

    async def leader_get(self, params: LeaderGetParams) -> LeaderRow | None:
        rows = await self._read("leader_get", {"name": params.name})
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

    async def schedule_delete(self, params: ScheduleDeleteParams) -> bool:
        return bool(await self._write("schedule_delete", {"name": params.name}))

    async def rate_limit_get(self, params: RateLimitGetParams) -> float | None:
        rows = await self._read("rate_limit_get", {"key": params.key})
        return float(rows[0]["tat"]) if rows else None

    async def job_concurrency_holders(self, params: ConcurrencyHoldersParams) -> list[int]:
        return [r["id"] for r in await self._read("concurrency_holders", {"key": params.key})]

    # -- queue cool-downs (Throttle(scope="queue")) ---------------------------------------

    async def queue_cooldown_raise(self, params: QueueCooldownRaiseParams) -> QueueCooldownRow:
        rows = await self._write("queue_cooldown_raise", {
            "queue": params.queue, "seconds": float(params.seconds), "cap": float(params.cap)})
        return _cooldown_row(rows[0])

    async def queue_cooldown_list(self) -> list[QueueCooldownRow]:
        return [_cooldown_row(r) for r in await self._read("queue_cooldown_list", {})]

    async def queue_cooldown_clear(self, params: QueueCooldownClearParams) -> bool:
        return bool(await self._write("queue_cooldown_clear", {"queue": params.queue}))

    # -- metrics -----------------------------------------------------------------------------

    async def metrics_series(self, params: MetricsSeriesParams) -> list[MetricPoint]:
        rows = await self._read("metrics_series", {"since": params.since, "queue": params.queue})
        return [MetricPoint(float(r["bucket"]), r["queue"], r["metric"], float(r["value"]))
                for r in rows]

    async def metrics_totals(self) -> list[MetricTotal]:
        rows = await self._read("metrics_totals", {})
        return [MetricTotal(r["queue"], r["task"], r["metric"], float(r["value"])) for r in rows]

    async def metrics_depth_sample(self, params: MetricsDepthSampleParams) -> None:
        await self._write("metrics_depth_sample", {"bucket": params.bucket})

    async def metrics_depth_series(self, params: MetricsSeriesParams) -> list[DepthPoint]:
        rows = await self._read("metrics_depth_series", {"since": params.since})
        return [DepthPoint(float(r["bucket"]), r["queue"], r["state"], int(r["n"])) for r in rows]

    # -- the testing toolkit (conveyor.testing; statements in <dialect>/testing.sql) ------

    def use_virtual_clock(self) -> None:
        """Measure time on the virtual clock (``clock.py``) from now on; before ``open``."""
        self._testing_sql()
        self._q = virtual_queries(self.dialect, self._q)
        self.virtual_clock = True

    def _testing_sql(self) -> None:
        """Load the toolkit's statements on first use: production never does."""
        if "job_claim_one" not in self._q:
            extra = testing_queries(self.dialect)
            self._q.update(virtual_queries(self.dialect, extra) if self.virtual_clock else extra)

    async def clock_join(self, offset: float) -> float:
        """Create the clock's table if needed and keep the larger of ``offset`` and the
        stored one (another process may have advanced it); the offset in force."""
        self._testing_sql()
        await self._write("clock_create", {})
        return float((await self._write("clock_join", {"offset": offset}))[0]["offset_seconds"])

    async def clock_set(self, offset: float) -> float:
        """Advance the stored offset to ``offset`` (never back); the offset in force."""
        self._testing_sql()
        return float((await self._write("clock_set", {"offset": offset}))[0]["offset_seconds"])

    async def job_claim_one(self, params: JobClaimOneParams) -> Job | None:
        self._testing_sql()
        return self._one(await self._write("job_claim_one", dataclasses.asdict(params)))

    async def job_stage_early(self, params: JobStageEarlyParams) -> list[StagedJob]:
        self._testing_sql()
        staged = []
        for previous in STAGED_STATES:
            values = {"queue": params.queue, "from_state": previous.value}
            for r in await self._write("job_stage_early", values):
                staged.append(StagedJob(r["id"], r["task"], r["queue"], r["attempt"], previous))
        self._woke(j.queue for j in staged)
        return staged


def _cooldown_row(r: Row) -> QueueCooldownRow:
    until, raised = ts(r["cool_until"]), ts(r["raised_at"])
    assert until is not None and raised is not None
    return QueueCooldownRow(queue=r["queue"], cool_until=until, seconds=float(r["seconds"]),
                            streak=int(r["streak"]), raised_at=raised,
                            remaining=float(r["remaining"]))


def changed_jobs(picked: Iterable[Row], done: set[int]) -> list[JobChanged]:
    """The picked rows a bulk update changed, with the state each left."""
    return [JobChanged(r["id"], r["task"], r["queue"], r["attempt"], JobState(r["state"]))
            for r in picked if r["id"] in done]
