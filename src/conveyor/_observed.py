"""The one choke point for state changes: a storage wrapper that tells listeners.

Every persisted transition of a job (enqueue, claim, outcome, staging, rescue, retry,
cancel, bulk actions, operator deletes) goes through an ``ObservedStorage``, which emits its
``StateChange`` to ``app.on_state_change`` listeners and hands worker outcomes to the
outcome listeners (the metrics service). A view names the source of its writes:
``storage.with_source("dashboard")``. Listeners are checked once per call (a batch),
so nobody listening costs one attribute read per batch. Every other storage method
passes straight through to the wrapped storage.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ._hooks import Hooks, StateChange
from ._job import Job, JobState
from ._storage import (
    Composed,
    ComposeParams,
    JobAck,
    JobAckManyParams,
    JobBulkParams,
    JobChanged,
    JobClaimOneParams,
    JobEditParams,
    JobExpireParams,
    JobFetchAvailableParams,
    JobInsert,
    JobPurgeBatch,
    JobPurgeParams,
    JobQueueDeleteParams,
    JobRescueExpiredParams,
    StagedJob,
    Storage,
)


class Attempt(Protocol):
    """What a worker knows of one attempt whose outcome it writes."""

    @property
    def job(self) -> Job: ...

    @property
    def run_time(self) -> float | None: ...


#: Called once per ack flush with the outcomes a worker wrote (the fence held), each
#: with its attempt (a batch, so that a listener pays per flush what it can).
OutcomeListener = Callable[[Sequence[tuple[Attempt, JobAck]]], None]
#: Finds the attempt an outcome belongs to (the worker's executions).
AttemptLookup = Callable[[int], Attempt | None]


class ObservedStorage:
    """``Storage`` plus state-change events; one view per source of writes."""

    def __init__(self, inner: Storage, hooks: Hooks, source: str = "api", *,
                 node: str | None = None, attempts: AttemptLookup | None = None) -> None:
        self.inner = inner
        self.hooks = hooks
        self.source = source
        self.node = node
        self._attempts = attempts
        self._outcome_listeners: list[OutcomeListener] = []
        #: Claimed jobs whose outcome is not written yet, kept only while someone listens
        #: (to describe an outcome that no attempt knows: a job held back by a limit).
        self._claimed: dict[int, Job] = {}
        self._views: dict[str, ObservedStorage] = {}

    def __getattr__(self, name: str) -> Any:
        """Every method that changes no job state: the wrapped storage's own."""
        value = getattr(self.inner, name)
        if name != "capabilities":
            setattr(self, name, value)  # found once, then a plain attribute
        return value

    def __repr__(self) -> str:
        return f"<ObservedStorage {self.source} of {self.inner!r}>"

    def with_source(self, source: str, *, node: str | None = None,
                    attempts: AttemptLookup | None = None) -> ObservedStorage:
        """A view of the same storage whose writes are attributed to ``source`` (plain
        views are made once and kept: the enqueue path asks for one per call)."""
        if node is not None or attempts is not None:
            return ObservedStorage(self.inner, self.hooks, source, node=node, attempts=attempts)
        view = self._views.get(source)
        if view is None:
            view = self._views[source] = ObservedStorage(self.inner, self.hooks, source)
        return view

    def on_outcome(self, listener: OutcomeListener) -> Callable[[], None]:
        """Call ``listener([(attempt, ack), ...])`` with the outcomes of each ack flush
        written through this view."""
        self._outcome_listeners.append(listener)
        return lambda: self._outcome_listeners.remove(listener)

    def _emit(self, changes: Sequence[StateChange]) -> None:
        self.hooks.emit(changes)

    # -- enqueue --------------------------------------------------------------------------

    async def job_insert_many(self, jobs: Sequence[JobInsert], connection: Any = None
                              ) -> list[Job]:
        inserted = await self.inner.job_insert_many(jobs, connection)
        # In the caller's transaction (connection=) nothing is persisted yet: no event.
        if self.hooks.listeners and connection is None:
            self.hooks.emit_jobs([j for j in inserted if not j.duplicate], None, self.source)
        return inserted

    async def compose(self, params: ComposeParams, connection: Any = None) -> Composed:
        """Workflows and batches: their jobs' enqueue events. Releases and cancels that a
        final state causes happen inside the database (the settle trigger): no event."""
        composed = await self.inner.compose(params, connection)
        if self.hooks.listeners and connection is None:
            self.hooks.emit_jobs(composed.jobs, None, self.source)
        return composed

    def job_insert_many_blocking(self, jobs: Sequence[JobInsert]) -> list[Job]:
        inserted = self.inner.job_insert_many_blocking(jobs)
        if self.hooks.listeners:
            self.hooks.emit_jobs([j for j in inserted if not j.duplicate], None, self.source)
        return inserted

    async def job_insert_ids(self, jobs: Sequence[JobInsert], connection: Any = None
                             ) -> list[int]:
        """Only ids: unless someone listens, whose events need the Jobs."""
        if self.hooks.listeners and connection is None:
            return [j.id for j in await self.job_insert_many(jobs)]
        return await self.inner.job_insert_ids(jobs, connection)

    def job_insert_ids_blocking(self, jobs: Sequence[JobInsert]) -> list[int]:
        if self.hooks.listeners:
            return [j.id for j in self.job_insert_many_blocking(jobs)]
        return self.inner.job_insert_ids_blocking(jobs)

    # -- the worker's hot path: claims and outcomes ------------------------------------------

    async def job_fetch_available(self, params: JobFetchAvailableParams) -> list[Job]:
        jobs = await self.inner.job_fetch_available(params)
        if jobs and self.hooks.listeners:
            for job in jobs:
                self._claimed[job.id] = job
            self._emit([StateChange(j.id, j.task, j.queue, j.attempt, JobState.RUNNING,
                                    JobState.AVAILABLE, self.source, node=self.node)
                        for j in jobs])
        return jobs

    async def job_claim_one(self, params: JobClaimOneParams) -> Job | None:
        """The testing toolkit's claim of one chosen job: the same event as a claim."""
        job = await self.inner.job_claim_one(params)
        if job is not None and self.hooks.listeners:
            self._claimed[job.id] = job
            self._emit([StateChange(job.id, job.task, job.queue, job.attempt, JobState.RUNNING,
                                    JobState.AVAILABLE, self.source, node=self.node)])
        return job

    async def job_ack_many(self, params: JobAckManyParams) -> list[int]:
        applied = await self.inner.job_ack_many(params)
        if applied and (self._outcome_listeners or self.hooks.listeners):
            self._outcomes(params.acks, set(applied))
        return applied

    def _outcomes(self, acks: Sequence[JobAck], applied: set[int]) -> None:
        """One batch's written outcomes: the outcome listeners get them in one call, and
        events are built only when someone listens (this runs for every ack flush)."""
        find = self._attempts
        claimed = self._claimed
        if not self.hooks.listeners:
            if claimed:  # claimed while someone listened: forget them all the same
                for ack in acks:
                    if ack.id in applied:
                        claimed.pop(ack.id, None)
            if self._outcome_listeners and find is not None:
                self._tell([(attempt, ack) for ack in acks if ack.id in applied
                            and (attempt := find(ack.id)) is not None])
            return
        outcomes: list[tuple[Attempt, JobAck]] = []
        changes: list[StateChange] = []
        for ack in acks:
            if ack.id not in applied:
                continue
            attempt = find(ack.id) if find is not None else None
            job = claimed.pop(ack.id, None)
            if attempt is not None:
                outcomes.append((attempt, ack))
                job = attempt.job
            if job is not None:
                error = json.loads(ack.error_json).get("error") if ack.error_json else None
                changes.append(StateChange(
                    job.id, job.task, job.queue, job.attempt, ack.state, JobState.RUNNING,
                    self.source, error, attempt.run_time if attempt is not None else None,
                    self.node))
        self._tell(outcomes)
        if changes:
            self._emit(changes)

    def _tell(self, outcomes: list[tuple[Attempt, JobAck]]) -> None:
        if outcomes:
            for listener in self._outcome_listeners:
                listener(outcomes)

    # -- services ----------------------------------------------------------------------------

    async def job_stage_due(self, *, limit: int = 5000) -> list[StagedJob]:
        staged = await self.inner.job_stage_due(limit=limit)
        if staged and self.hooks.listeners:
            self._emit([StateChange(j.id, j.task, j.queue, j.attempt, JobState.AVAILABLE,
                                    j.previous, self.source) for j in staged])
        return staged

    async def job_stage_early(self, *, queue: str | None = None) -> list[StagedJob]:
        staged = await self.inner.job_stage_early(queue=queue)
        if staged and self.hooks.listeners:
            self._emit([StateChange(j.id, j.task, j.queue, j.attempt, JobState.AVAILABLE,
                                    j.previous, self.source) for j in staged])
        return staged

    async def job_rescue_expired(self, params: JobRescueExpiredParams) -> list[int]:
        ids = await self.inner.job_rescue_expired(params)
        if ids and self.hooks.listeners:
            # Rescues are rare: read the rows back only when someone listens.
            jobs = [await self.inner.job_get(i) for i in ids]
            self.hooks.emit_jobs([j for j in jobs if j is not None], JobState.RUNNING, self.source)
        return ids

    # -- operators: one job, or many --------------------------------------------------------

    async def _state_before(self, job_id: int) -> JobState | None:
        if not self.hooks.listeners:
            return None
        job = await self.inner.job_get(job_id)
        return job.state if job is not None else None

    async def job_retry(self, job_id: int) -> Job | None:
        before = await self._state_before(job_id)
        job = await self.inner.job_retry(job_id)
        self.hooks.changed(job, before, self.source)
        return job

    async def job_retry_edited(self, params: JobEditParams) -> Job | None:
        before = await self._state_before(params.job_id)
        job = await self.inner.job_retry_edited(params)
        self.hooks.changed(job, before, self.source)
        return job

    async def job_cancel(self, job_id: int) -> Job | None:
        before = await self._state_before(job_id)
        job = await self.inner.job_cancel(job_id)
        self.hooks.changed(job, before, self.source)
        return job

    async def job_retry_matching(self, params: JobBulkParams) -> list[JobChanged]:
        changed = await self.inner.job_retry_matching(params)
        self._emit_changed(changed, JobState.AVAILABLE)
        return changed

    async def job_discard_matching(self, params: JobBulkParams) -> list[JobChanged]:
        changed = await self.inner.job_discard_matching(params)
        self._emit_changed(changed, JobState.DISCARDED)
        return changed

    async def job_expire(self, params: JobExpireParams) -> list[JobChanged]:
        changed = await self.inner.job_expire(params)
        self._emit_changed(changed, JobState.CANCELLED)
        return changed

    # -- operators: deleting rows ----------------------------------------------------------

    async def job_delete(self, job_id: int, *, force: bool = False) -> Job | None:
        job = await self.inner.job_delete(job_id, force=force)
        if job is not None and self.hooks.listeners:
            self._emit([StateChange(job.id, job.task, job.queue, job.attempt, job.state,
                                    job.state, self.source, deleted=True)])
        return job

    async def job_purge_batch(self, params: JobPurgeParams) -> JobPurgeBatch:
        batch = await self.inner.job_purge_batch(params)
        self._emit_deleted(batch.deleted)
        return batch

    async def job_delete_by_queue(self, params: JobQueueDeleteParams) -> JobPurgeBatch:
        batch = await self.inner.job_delete_by_queue(params)
        self._emit_deleted(batch.deleted)
        return batch

    def _emit_deleted(self, deleted: list[JobChanged]) -> None:
        if deleted and self.hooks.listeners:
            self._emit([StateChange(c.id, c.task, c.queue, c.attempt, c.previous, c.previous,
                                    self.source, deleted=True) for c in deleted])

    def _emit_changed(self, changed: list[JobChanged], state: JobState) -> None:
        if changed and self.hooks.listeners:
            self._emit([StateChange(c.id, c.task, c.queue, c.attempt, state, c.previous,
                                    self.source) for c in changed])


