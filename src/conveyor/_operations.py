"""The operator API: what the dashboard and the CLI read and change, through the app.

``Operations(app)`` calls the app's public methods and ``await app.storage()``; it never
reaches for the app's private state, so the dashboard and the CLI see exactly what the
app sees. Its writes go through the app's storage view for ``source``, so the storage
choke point (``_observed.py``) announces each state change as the operator's.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from ._errors import JobNotFoundError
from ._job import DISCARDABLE_FROM, RETRYABLE_FROM, Job, JobState
from ._storage import (
    DbHealth,
    DbHealthParams,
    DepthPoint,
    FailureGroup,
    JobBulkParams,
    JobCancelParams,
    JobCountByQueueParams,
    JobCountCappedParams,
    JobFailureGroupsParams,
    JobFilter,
    JobGetParams,
    JobRetryParams,
    JobSearchParams,
    LeaderRow,
    MetricPoint,
    MetricsSeriesParams,
    MetricTotal,
    Migration,
    NodeRow,
    QueueRow,
    StateCount,
    WakeHub,
    create_storage,
    load_migrations,
)

if TYPE_CHECKING:
    from datetime import datetime

    from ._app import Conveyor
    from ._app.composition import Batch, WorkflowInfo


#: What a bulk action changes when its filter names no state: failed jobs (and for a
#: retry, discarded and cancelled ones). Never completed jobs unless named: re-running
#: them would re-send every email and re-charge every card.
BULK_DEFAULT_STATES: dict[str, tuple[JobState, ...]] = {
    "retry": (JobState.RETRYABLE, JobState.DISCARDED, JobState.CANCELLED),
    "discard": (JobState.RETRYABLE,),
}
#: The states each bulk action may change at all, when named in the filter.
BULK_ALLOWED_STATES: dict[str, tuple[JobState, ...]] = {
    "retry": RETRYABLE_FROM, "discard": DISCARDABLE_FROM,
}
#: "Cancel workflow" repeats at most this many rounds (each settles what the last released).
CANCEL_ROUNDS = 5


def bulk_states(action: str, named: tuple[JobState, ...]) -> tuple[JobState, ...]:
    """The states a bulk ``action`` ("retry" or "discard") changes for a filter naming
    ``named`` (empty: none named): the defaults, or the named ones it may change (maybe
    none at all)."""
    if not named:
        return BULK_DEFAULT_STATES[action]
    return tuple(s for s in named if s in BULK_ALLOWED_STATES[action])


def bulk_filter(action: str, flt: JobFilter) -> JobFilter | None:
    """``flt`` narrowed to the states ``action`` changes; None when it changes nothing."""
    states = bulk_states(action, flt.states)
    return dataclasses.replace(flt, states=states) if states else None


@dataclasses.dataclass(frozen=True, slots=True)
class JobAction:
    """A single-job action: the job before it, and after (None: not allowed in its state)."""

    before: Job
    after: Job | None


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
        return await probe.db_health(DbHealthParams(timeout))

    async def delete_queue_jobs(self, queue: str) -> int:
        """Delete every job of ``queue`` (``conveyor bench`` cleans its own queue)."""
        return await (await self.app.storage_for(self.source)).job_delete_by_queue(queue)

    # -- reads --------------------------------------------------------------------------------

    async def count_by_queue(self, cap: int) -> list[StateCount]:
        """Jobs per queue and state; final states stop counting at ``cap``."""
        storage = await self.app.storage()
        return await storage.job_count_by_queue(JobCountByQueueParams(cap))

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

    async def metric_series(self, since: float) -> list[MetricPoint]:
        storage = await self.app.storage()
        return await storage.metrics_series(MetricsSeriesParams(since))

    async def depth_series(self, since: float) -> list[DepthPoint]:
        storage = await self.app.storage()
        return await storage.metrics_depth_series(MetricsSeriesParams(since))

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

    async def bounded(self, flt: JobFilter, scan: int) -> JobFilter:
        """A search in args covers the newest ``scan`` jobs only, so it stays fast on any
        table (ids grow with time; the newest id is one index lookup away)."""
        if not flt.text or flt.min_id is not None:
            return flt
        newest = await self.search_jobs(JobFilter(), 1)
        if not newest or newest[0].id <= scan:
            return flt
        return dataclasses.replace(flt, min_id=newest[0].id - scan + 1)

    async def failure_groups(self, queue: str | None, task: str | None) -> list[FailureGroup]:
        storage = await self.app.storage()
        return await storage.job_failure_groups(JobFailureGroupsParams(queue=queue, task=task))

    # -- one job ------------------------------------------------------------------------------

    async def retry_job(self, job_id: int) -> JobAction:
        """Back in its queue now, with one more attempt (``after`` None: not allowed)."""
        storage = await self.app.storage_for(self.source)
        return await self._one(job_id, lambda: storage.job_retry(JobRetryParams(job_id)))

    async def cancel_job(self, job_id: int) -> JobAction:
        """Cancelled at once if waiting; a running job is stopped by its worker."""
        storage = await self.app.storage_for(self.source)
        return await self._one(job_id, lambda: storage.job_cancel(JobCancelParams(job_id)))

    async def discard_job(self, job_id: int) -> JobAction:
        """Discarded now, if it is waiting."""
        before = await self._before(job_id)
        changed = await self._matching("discard", JobFilter(ids=(job_id,)), 1)
        return JobAction(before, before if changed else None)

    async def delete_job(self, job_id: int) -> JobAction:
        """Its row deleted now, unless it is running (``after`` None: cancel it first);
        ``after`` is the row as it was."""
        storage = await self.app.storage_for(self.source)
        return await self._one(job_id, lambda: storage.job_delete(job_id))

    async def _before(self, job_id: int) -> Job:
        storage = await self.app.storage()
        before = await storage.job_get(JobGetParams(job_id))
        if before is None:
            raise JobNotFoundError(f"no job with id {job_id}")
        return before

    async def _one(self, job_id: int, change: Callable[[], Awaitable[Job | None]]) -> JobAction:
        before = await self._before(job_id)
        return JobAction(before, await change())

    # -- many jobs ----------------------------------------------------------------------------

    async def retry_matching(self, flt: JobFilter, limit: int) -> int:
        """Retry every job matching ``flt``, at most ``limit``; how many were retried.
        Only the states of ``bulk_states("retry", flt.states)``: without a state in
        the filter, failed, discarded and cancelled jobs, never completed ones."""
        narrowed = bulk_filter("retry", flt)
        return await self._matching("retry", narrowed, limit) if narrowed else 0

    async def discard_matching(self, flt: JobFilter, limit: int) -> int:
        """Discard every waiting job matching ``flt``, at most ``limit``: without a
        state in the filter, only retryable (failed) ones."""
        narrowed = bulk_filter("discard", flt)
        return await self._matching("discard", narrowed, limit) if narrowed else 0

    async def count_bulk(self, action: str, flt: JobFilter,
                         cap: int) -> list[tuple[JobState, int]]:
        """What a bulk ``action`` on ``flt`` would change: each of its states and how
        many jobs match in it (each count stops at ``cap``)."""
        return [(state, await self.count_matching(dataclasses.replace(flt, states=(state,)),
                                                  cap))
                for state in bulk_states(action, flt.states)]

    async def _matching(self, action: str, flt: JobFilter, limit: int) -> int:
        storage = await self.app.storage_for(self.source)
        params = JobBulkParams(flt, limit=limit)
        if action == "retry":
            return len(await storage.job_retry_matching(params))
        return len(await storage.job_discard_matching(params))

    # -- workflows and batches ------------------------------------------------------------------

    async def get_workflow(self, workflow_id: str) -> WorkflowInfo | None:
        return await self.app.get_workflow_async(workflow_id)

    async def get_batch(self, batch_id: int) -> Batch | None:
        return await self.app.get_batch_async(batch_id)

    async def batch_jobs(self, batch_id: int, after_id: int, limit: int) -> list[Job]:
        """A page of the batch's members in id order (keyset: ids after ``after_id``)."""
        return await (await self.app.storage()).batch_jobs(batch_id, after_id, limit)

    async def callback_batch(self, job_id: int) -> int | None:
        """The batch whose callback this job is, if it is one."""
        return await (await self.app.storage()).batch_waited_on(job_id)

    async def cancel_workflow(self, workflow_id: str) -> int:
        """Cancel every job of the workflow that is not final yet; how many were changed.

        The jobs that could run (waiting, running) go first, so the database's cascade
        settles most ``pending`` dependents by itself. Cancelling a dependency releases
        a dependent whose edge says "run", so more rounds follow until one finds nothing
        left to cancel."""
        changed = 0
        for round_ in range(CANCEL_ROUNDS):
            info = await self.get_workflow(workflow_id)
            targets = [j for j in (info.jobs if info is not None else [])
                       if not j.state.is_final and not j.cancel_requested
                       and (round_ > 0 or j.state is not JobState.PENDING)]
            done = 0
            for job in targets:
                with contextlib.suppress(JobNotFoundError):  # deleted meanwhile
                    done += (await self.cancel_job(job.id)).after is not None
            changed += done
            if round_ > 0 and not done:
                break
        return changed

    # -- schedules ------------------------------------------------------------------------------

    async def trigger_schedule(self, name: str) -> Job:
        """Enqueue schedule ``name``'s job now, outside its ticks."""
        return await self.app.trigger_schedule_as(name, self.source)


__all__ = ["BULK_ALLOWED_STATES", "BULK_DEFAULT_STATES", "CANCEL_ROUNDS", "JobAction",
           "Operations", "bulk_filter", "bulk_states"]
