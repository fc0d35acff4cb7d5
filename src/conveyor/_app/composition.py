"""Workflows and batches: the async core of ``enqueue_workflow``, ``batch`` and
``task.options(depends_on=...)``, between ``TasksApp`` and ``ControlApp``.

Every insert here is one transaction (the caller's with ``connection=``). What happens
when a job becomes final (dependents released or cancelled, batch counters, callbacks
run once) is the database's settle trigger (schema 10), inside the write that made it
final, whichever path wrote it: worker acks, rescues, operator cancels and discards.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from .. import _payload
from .._errors import BatchNotFoundError, WorkflowError
from .._job import FINAL_STATES, MAX_ID, Job, JobState
from .._storage import (
    BatchAddParams,
    BatchCreateParams,
    BatchRow,
    Composed,
    WorkflowDep,
    WorkflowInsertParams,
    WorkflowNode,
)
from .._task import JobSpec
from .._workflow import Chain, Chord, Group, Workflow
from .caller import caller_connection, caller_connection_async
from .jobs import _check_id
from .tasks import TasksApp


@dataclasses.dataclass(frozen=True, slots=True)
class WorkflowRun:
    """What ``enqueue_workflow`` wrote: the workflow's id and its jobs in ``add`` order."""

    id: str
    jobs: list[Job]


@dataclasses.dataclass(frozen=True, slots=True)
class WorkflowEdge:
    """``job_id`` waits on ``depends_on``; ``on_failure`` is the edge's policy."""

    job_id: int
    depends_on: int
    on_failure: str


@dataclasses.dataclass(frozen=True, slots=True)
class WorkflowInfo:
    """A workflow as stored: its jobs (with states), its edges and counts per state;
    what a page needs to draw it."""

    id: str
    jobs: list[Job]
    edges: list[WorkflowEdge]

    @property
    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in JobState}
        for job in self.jobs:
            out[job.state.value] += 1
        return out

    @property
    def finished(self) -> bool:
        return all(j.state in FINAL_STATES for j in self.jobs)

    @property
    def failed(self) -> bool:
        return any(j.state in (JobState.DISCARDED, JobState.CANCELLED) for j in self.jobs)


@dataclasses.dataclass(frozen=True, slots=True)
class Batch:
    """A batch and its counts. ``pending`` counts its jobs not final yet; the callbacks
    (job ids) run once: on_complete when every job is final (after ``batch_close`` for
    an open batch), on_success when every job completed, on_discard at the first
    discarded job."""

    id: int
    open: bool
    total: int
    completed: int
    discarded: int
    cancelled: int
    on_success: int | None
    on_complete: int | None
    on_discard: int | None
    created_at: datetime
    finished_at: datetime | None
    meta: dict[str, Any]
    #: The jobs added by this call (``batch`` and ``batch_add``); empty from ``get_batch``.
    jobs: list[Job] = dataclasses.field(default_factory=list)

    @property
    def pending(self) -> int:
        return self.total - self.completed - self.discarded - self.cancelled

    @property
    def finished(self) -> bool:
        return self.finished_at is not None


@dataclasses.dataclass(frozen=True, slots=True)
class Dependency:
    """One dependency of a job, as a handler reads it: ``state`` None when deleted."""

    id: int
    task: str | None
    state: JobState | None
    result: Any
    error: dict[str, Any] | None
    on_failure: str


def _batch(row: BatchRow, jobs: list[Job] | None = None) -> Batch:
    values = {f.name: getattr(row, f.name) for f in dataclasses.fields(row)}
    return Batch(**values, jobs=jobs or [])


def _specs(jobs: object, what: str) -> list[JobSpec]:
    if isinstance(jobs, JobSpec) or not isinstance(jobs, Sequence):
        raise TypeError(f"{what} takes a list of jobs built with task.job(...)")
    for spec in jobs:
        if not isinstance(spec, JobSpec):
            raise TypeError(f"{what} takes jobs built with task.job(...), got {spec!r}")
    return list(jobs)


class CompositionApp(TasksApp):
    """Dependencies, workflows and batches; see ``Conveyor``."""

    # -- building the storage params ------------------------------------------------------

    def _node(self, spec: JobSpec, deps: tuple[WorkflowDep, ...] = (),
              results_arg: str | None = None) -> WorkflowNode:
        insert = self._insert(spec, self.clock.time() if self.clock is not None else None)
        if insert.unique_key is not None:
            raise WorkflowError(f"task {spec.task.name!r} is unique: a unique job cannot have "
                                "dependencies or be part of a workflow or batch")
        if insert.expires_in is not None or insert.expires_at is not None:
            raise WorkflowError(f"a job of task {spec.task.name!r} has an expiry: a job that "
                                "expires cannot have dependencies or be part of a workflow "
                                "or batch")
        own = tuple(WorkflowDep(i, False, spec.options.on_failure)
                    for i in spec.options.depends_on)
        return WorkflowNode(insert, deps + own, results_arg)

    def _workflow_params(self, wf: Workflow) -> WorkflowInsertParams:
        planned = wf.resolve()
        nodes = [self._node(p.spec, tuple(
            [WorkflowDep(i, True, pol) for i, pol in p.waits_on.items()]
            + [WorkflowDep(i, False, pol) for i, pol in p.waits_on_ids.items()]), p.results_arg)
            for p in planned]
        return WorkflowInsertParams(nodes, str(uuid.uuid4()))  # each enqueue: a new run

    async def _compose_async(self, params: Any, connection: Any) -> Composed:
        if connection is not None:
            raw = await caller_connection_async(connection, self.dialect)
            if type(raw).__module__.startswith("aiosqlite."):
                composed: Composed = await raw._execute(self._offline.compose_sync, params,
                                                        raw._conn)
            else:
                composed = await self._offline.compose(params, raw)
        else:
            composed = await (await self._observed()).with_source("enqueue").compose(params)
        self._bound(composed.jobs)  # each can be waited on (job.wait)
        return composed

    def _compose(self, params: Any, connection: Any) -> Composed:
        if connection is not None:
            composed = self._offline.compose_sync(
                params, caller_connection(connection, self.dialect))
            self._bound(composed.jobs)
            return composed
        return self._sync(self._compose_async(params, None))

    # -- enqueue with depends_on ------------------------------------------------------------

    async def enqueue_many_async(
        self, specs: Sequence[JobSpec], *, connection: Any = None
    ) -> list[Job]:
        if _has_deps(specs):  # one transaction, through the workflow insert
            params = WorkflowInsertParams([self._node(s) for s in _specs(specs, "enqueue_many")])
            return (await self._compose_async(params, connection)).jobs
        return await super().enqueue_many_async(specs, connection=connection)

    def enqueue_many(self, specs: Sequence[JobSpec], *, connection: Any = None) -> list[Job]:
        if _has_deps(specs):
            params = WorkflowInsertParams([self._node(s) for s in _specs(specs, "enqueue_many")])
            return self._compose(params, connection).jobs
        return super().enqueue_many(specs, connection=connection)

    async def enqueue_many_ids_async(
        self, specs: Sequence[JobSpec], *, connection: Any = None
    ) -> list[int]:
        if _has_deps(specs):
            return [j.id for j in await self.enqueue_many_async(specs, connection=connection)]
        return await super().enqueue_many_ids_async(specs, connection=connection)

    def enqueue_many_ids(self, specs: Sequence[JobSpec], *, connection: Any = None) -> list[int]:
        if _has_deps(specs):
            return [j.id for j in self.enqueue_many(specs, connection=connection)]
        return super().enqueue_many_ids(specs, connection=connection)

    # -- workflows --------------------------------------------------------------------------

    def _workflow(self, wf: object) -> WorkflowInsertParams:
        if isinstance(wf, JobSpec | Chain | Group | Chord):
            wf = Workflow(wf)
        if not isinstance(wf, Workflow):
            raise TypeError("enqueue_workflow takes a Workflow, chain, group or chord, "
                            f"got {type(wf).__name__}")
        if not wf.jobs:
            raise WorkflowError("the workflow has no jobs")
        return self._workflow_params(wf)

    async def enqueue_workflow_async(self, wf: Workflow | Chain | Group | Chord, *,
                                     connection: Any = None) -> WorkflowRun:
        """Insert every job of ``wf`` and its dependencies in one transaction (the
        caller's with ``connection``). Example: ``await app.enqueue_workflow_async(wf)``"""
        params = self._workflow(wf)
        composed = await self._compose_async(params, connection)
        return WorkflowRun(str(params.workflow_id), composed.jobs)

    def _enqueue_workflow_on(self, wf: Workflow | Chain | Group | Chord,
                             connection: Any) -> WorkflowRun:
        """``enqueue_workflow`` in a sync caller's transaction, on the caller's thread."""
        params = self._workflow(wf)
        return WorkflowRun(str(params.workflow_id), self._compose(params, connection).jobs)

    async def get_workflow_async(self, workflow_id: str) -> WorkflowInfo | None:
        if not isinstance(workflow_id, str) or not workflow_id:
            raise TypeError(f"a workflow id is a non-empty string, got {workflow_id!r}")
        storage = await self.storage()
        jobs = await storage.workflow_jobs(workflow_id)
        if not jobs:
            return None
        edges = await storage.workflow_edges(workflow_id)
        return WorkflowInfo(workflow_id, self._bound(jobs), [
            WorkflowEdge(e.job_id, e.depends_on, e.on_failure) for e in edges])

    async def job_dependencies_async(self, job_id: int) -> list[Dependency]:
        """What a job waits (or waited) on, results and last errors included; a handler
        reads its own with ``current_job().id``."""
        rows = await (await self.storage()).job_dependencies(_check_id(job_id))
        return [Dependency(r.id, r.task, None if r.state is None else JobState(r.state),
                           r.result, r.errors[-1] if r.errors else None, r.on_failure)
                for r in rows]

    # -- batches ----------------------------------------------------------------------------

    def _batch_create(self, jobs: object, callbacks: Mapping[str, object], open_: bool,
                      meta: Mapping[str, Any] | None) -> BatchCreateParams:
        specs = _specs(jobs, "batch")
        given = {}
        for kind, spec in callbacks.items():
            if spec is None:
                continue
            if not isinstance(spec, JobSpec):
                raise TypeError(f"{kind}= takes a job built with task.job(...), got {spec!r}")
            given[kind] = self._node(spec).job
        if not isinstance(open_, bool):
            raise TypeError("open= is True or False")
        meta_json = _payload.encode_meta("batch", dict(meta or {}), self.config.max_payload_bytes)
        return BatchCreateParams([self._node(s) for s in specs], given, open_, meta_json)

    async def batch_async(
        self, jobs: Sequence[JobSpec], *, on_success: JobSpec | None = None,
        on_complete: JobSpec | None = None, on_discard: JobSpec | None = None,
        open: bool = False, meta: Mapping[str, Any] | None = None, connection: Any = None,
    ) -> Batch:
        """Enqueue ``jobs`` as one batch with callbacks, in one transaction.

        Example: ``await app.batch_async([a.job(1), a.job(2)], on_success=done.job())``
        """
        params = self._batch_create(jobs, {"on_success": on_success, "on_complete": on_complete,
                                           "on_discard": on_discard}, open, meta)
        return _composed_batch(await self._compose_async(params, connection))

    def _batch_on(self, jobs: Sequence[JobSpec], callbacks: Mapping[str, JobSpec | None],
                  open_: bool, meta: Mapping[str, Any] | None, connection: Any) -> Batch:
        """``batch`` in a sync caller's transaction, on the caller's thread."""
        params = self._batch_create(jobs, callbacks, open_, meta)
        return _composed_batch(self._compose(params, connection))

    async def batch_add_async(self, batch_id: int, jobs: Sequence[JobSpec], *,
                              connection: Any = None) -> list[Job]:
        """Add jobs to an open batch. Example: ``await app.batch_add_async(b.id, [a.job(3)])``"""
        params = BatchAddParams(_check_batch_id(batch_id),
                                [self._node(s) for s in _specs(jobs, "batch_add")])
        return (await self._compose_async(params, connection)).jobs

    async def batch_close_async(self, batch_id: int) -> Batch:
        """No more jobs: the batch finishes when its jobs are final (maybe now)."""
        storage = (await self._observed()).with_source("api")
        row = await storage.batch_close(_check_batch_id(batch_id))
        if row is None:
            raise BatchNotFoundError(f"no batch has id {batch_id}")
        return _batch(row)

    async def get_batch_async(self, batch_id: int) -> Batch | None:
        try:
            checked = _check_batch_id(batch_id)
        except BatchNotFoundError:
            return None
        row = await (await self.storage()).batch_get(checked)
        return None if row is None else _batch(row)


def _composed_batch(composed: Composed) -> Batch:
    assert composed.batch is not None
    return _batch(composed.batch, composed.jobs)


def _has_deps(specs: object) -> bool:
    return isinstance(specs, Sequence) and any(
        isinstance(s, JobSpec) and s.options.depends_on for s in specs)


def _check_batch_id(batch_id: object) -> int:
    """A batch id; one past the 64-bit range names no batch."""
    if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 1:
        raise TypeError(f"a batch id is a positive int, got {batch_id!r}")
    if batch_id > MAX_ID:
        raise BatchNotFoundError(f"no batch has id {batch_id}")
    return batch_id
