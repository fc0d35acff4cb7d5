"""The operator API: what the dashboard and the CLI read and change, through the app.

Its reads are the primitives (one query each); what a page or ``conveyor status``
shows is composed from them once, in ``conveyor._app.reads``. ``Operations(app)``
calls the app's public methods and ``await app.storage()``; it never reaches for the
app's private state, so the dashboard and the CLI see exactly what the app sees. Its
actions are one line each into the app's (``MaintenanceApp``, written once for every
interface) with its ``source``, so each state-change event names who asked and a
refusal raises as it does for the Python API.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from .._job import Job, JobState
from .._storage import (
    BatchJobsParams,
    DbHealth,
    DepthPoint,
    FailureGroup,
    FairKeyRow,
    JobCountCappedParams,
    JobEdit,
    JobFailureGroupsParams,
    JobFilter,
    JobQueueDeleteParams,
    JobSearchParams,
    LeaderRow,
    MetricPoint,
    MetricsSeriesParams,
    MetricTotal,
    Migration,
    NodeRow,
    QueueRow,
    RequiresCount,
    StateCount,
    WakeHub,
    create_storage,
    load_migrations,
)
from . import search
from .maintenance import BULK_ALLOWED_STATES, BULK_DEFAULT_STATES, bulk_filter, bulk_states

if TYPE_CHECKING:
    from datetime import datetime

    from .app import Conveyor
    from .composition import Batch, WorkflowInfo


class Operations:
    """Reads and actions for operators, on one app. ``source`` names who acts in the
    state-change events (``"dashboard"``, ``"cli"``)."""

    def __init__(self, app: Conveyor, source: str = "dashboard") -> None:
        self.app = app
        self.source = source

    # -- the database -------------------------------------------------------------------------

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgres"``, without connecting."""
        return self.app.dialect

    def all_migrations(self) -> list[Migration]:
        """Every migration of the app's dialect, read offline."""
        return load_migrations(self.dialect)

    def pending_migrations(self) -> list[Migration]:
        """Migrations the database still needs (applies nothing)."""
        return self.app.pending_migrations()

    async def health(self, timeout: float = 3.0) -> DbHealth:
        """Asked of a fresh storage that is never opened: opening SQLite would create a
        missing database file, and a health check must not."""
        probe = create_storage(self.app.url, WakeHub(), 1)
        return await probe.db_health(timeout=timeout)

    async def delete_queue_jobs(self, queue: str) -> int:
        """Delete every job of ``queue``, whatever its state, in batches (``conveyor bench``
        cleans its own queue); how many."""
        storage = await self.app.storage_for(self.source)
        deleted, after = 0, 0
        while True:
            batch = await storage.job_delete_by_queue(JobQueueDeleteParams(queue, after_id=after))
            deleted += len(batch.deleted)
            if batch.next_after is None:
                return deleted
            after = batch.next_after

    # -- reads (composed into views in conveyor._app.reads) ------------------------------------

    async def count_by_queue(self, cap: int) -> list[StateCount]:
        """Jobs per queue and state; final states stop counting at ``cap``."""
        storage = await self.app.storage()
        return await storage.job_count_by_queue(final_cap=cap)

    async def requiring(self) -> list[RequiresCount]:
        """Waiting jobs that require worker labels, per queue and requirement."""
        return await (await self.app.storage()).job_count_requiring()

    async def fair_keys(self, queue: str) -> list[FairKeyRow]:
        """A queue's fair keys with waiting jobs (or a weight), by key."""
        return await self.app.list_fair_keys_async(queue)

    async def queue_rows(self) -> list[QueueRow]:
        return await (await self.app.storage()).queue_list()

    async def nodes(self) -> list[NodeRow]:
        return await self.app.list_nodes_async()

    async def alive_nodes(self) -> list[NodeRow]:
        return [n for n in await self.app.list_nodes_async() if n.alive]

    async def leader(self) -> LeaderRow | None:
        return await self.app.get_leader_async()

    async def running_by_node(self) -> dict[str, int]:
        return await (await self.app.storage()).job_count_running_by_node()

    async def clock_now(self) -> datetime:
        return await (await self.app.storage()).clock_now()

    async def metric_series(self, since: float, *, queue: str | None = None,
                            task: str | None = None, step: float = 60.0,
                            merged: bool = False) -> list[MetricPoint]:
        storage = await self.app.storage()
        return await storage.metrics_series(
            MetricsSeriesParams(since, queue=queue, task=task, step=step, merged=merged))

    async def depth_series(self, since: float, *, queue: str | None = None,
                           step: float = 60.0) -> list[DepthPoint]:
        storage = await self.app.storage()
        return await storage.metrics_depth_series(
            MetricsSeriesParams(since, queue=queue, step=step))

    async def metric_totals(self) -> list[MetricTotal]:
        return await (await self.app.storage()).metrics_totals()

    async def get_job(self, job_id: int) -> Job | None:
        return await self.app.get_job_async(job_id)

    async def search_jobs(self, flt: JobFilter, limit: int, before: int | None = None,
                          after: int | None = None) -> list[Job]:
        storage = await self.app.storage()
        return await storage.job_search(JobSearchParams(flt, limit, before, after))

    async def count_matching(self, flt: JobFilter, cap: int) -> int:
        """Jobs matching ``flt``, counted up to ``cap`` at most."""
        storage = await self.app.storage()
        return await storage.job_count_capped(JobCountCappedParams(flt, cap))

    async def bounded(self, flt: JobFilter, scan: int, *, before: int | None = None,
                      after: int | None = None) -> tuple[JobFilter, search.Window | None]:
        """A search in args reads one window of ``scan`` ids (below ``before``, above
        ``after``, else the newest), so each request stays fast on any table; the
        window says where it ended (``search.window``)."""
        return await search.window(await self.app.storage(), flt, scan, before=before,
                                   after=after)

    async def search_page(self, flt: JobFilter, limit: int, before: int | None,
                          scan: int) -> search.SearchPage:
        """A page of ``flt`` below ``before`` and where to go on (``search.search_page``)."""
        return await search.search_page(await self.app.storage(), flt, limit, before, scan)

    async def failure_groups(self, queue: str | None, task: str | None) -> list[FailureGroup]:
        storage = await self.app.storage()
        return await storage.job_failure_groups(JobFailureGroupsParams(queue=queue, task=task))

    # -- actions: each written once in the app, attributed to ``source`` ----------------------

    async def retry_job(self, job_id: int) -> Job:
        """Back in its queue now, with one more attempt (``app.retry_job_async``)."""
        return await self.app.retry_job_async(job_id, source=self.source)

    async def retry_job_edited(self, job_id: int, args: Any, kwargs: Any,
                               user: str | None = None) -> Job:
        """Edit and retry (``app.retry_job_async(..., args=, kwargs=)``), attributed to
        ``source`` and ``user``."""
        return await self.app.retry_job_async(job_id, args=args, kwargs=kwargs,
                                              source=self.source, user=user)

    async def job_edits(self, job_id: int) -> list[JobEdit]:
        return await self.app.job_edits_async(job_id)

    async def cancel_job(self, job_id: int) -> Job:
        """Cancelled at once if waiting; a running job is stopped by its worker."""
        return await self.app.cancel_job_async(job_id, source=self.source)

    async def discard_job(self, job_id: int) -> Job:
        """Discarded now, if it is waiting."""
        return await self.app.discard_job_async(job_id, source=self.source)

    async def delete_job(self, job_id: int) -> Job:
        """Its row deleted now, unless it is running (cancel it first); the row as it was."""
        return await self.app.delete_job_async(job_id, source=self.source)

    async def retry_matching(self, flt: JobFilter, limit: int) -> int:
        """``app.retry_matching_async``: how many were retried."""
        return await self.app.retry_matching_async(flt, limit=limit, source=self.source)

    async def discard_matching(self, flt: JobFilter, limit: int) -> int:
        """``app.discard_matching_async``: how many were discarded."""
        return await self.app.discard_matching_async(flt, limit=limit, source=self.source)

    async def cancel_workflow(self, workflow_id: str) -> int:
        """``app.cancel_workflow_async``: how many jobs were cancelled."""
        return await self.app.cancel_workflow_async(workflow_id, source=self.source)

    async def trigger_schedule(self, name: str) -> Job:
        """Enqueue schedule ``name``'s job now, outside its ticks."""
        return await self.app.trigger_schedule_async(name, source=self.source)

    async def count_bulk(self, action: str, flt: JobFilter,
                         cap: int) -> list[tuple[JobState, int]]:
        """What a bulk ``action`` on ``flt`` would change: each of its states and how
        many jobs match in it (each count stops at ``cap``)."""
        return [(state, await self.count_matching(dataclasses.replace(flt, states=(state,)),
                                                  cap))
                for state in bulk_states(action, flt.states)]

    # -- workflows and batches ------------------------------------------------------------------

    async def get_workflow(self, workflow_id: str) -> WorkflowInfo | None:
        return await self.app.get_workflow_async(workflow_id)

    async def get_batch(self, batch_id: int) -> Batch | None:
        return await self.app.get_batch_async(batch_id)

    async def batch_jobs(self, batch_id: int, after_id: int, limit: int) -> list[Job]:
        """A page of the batch's members in id order (keyset: ids after ``after_id``)."""
        storage = await self.app.storage()
        return await storage.batch_jobs(BatchJobsParams(batch_id, after_id, limit))

    async def callback_batch(self, job_id: int) -> int | None:
        """The batch whose callback this job is, if it is one."""
        return await (await self.app.storage()).batch_waited_on(job_id)


__all__ = ["BULK_ALLOWED_STATES", "BULK_DEFAULT_STATES", "Operations", "bulk_filter",
           "bulk_states"]
