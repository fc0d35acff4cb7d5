"""Workflows and batches over any backend: the storage methods, once.

``CompositionStorage`` sits between ``ClusterStorage`` and each backend: a backend adds
``_run_steps`` (the steps of ``workflow.py`` in one transaction, its own or the
caller's) and the rest is named statements. What a final state settles (dependents,
batch counters, callbacks) is not here: migration 0010's triggers run it inside every
write that makes a job final, whichever path wrote it.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from .._job import Job, JobState
from . import workflow
from .base import Row
from .cluster import ClusterStorage
from .rows import loads, ts
from .workflow import ComposeParams
from .workflow_types import BatchJobsParams, BatchRow, Composed, DependencyRow, EdgeRow


class CompositionStorage(ClusterStorage):
    """``ClusterStorage`` plus job dependencies, workflows and batches."""

    @abstractmethod
    async def _run_steps(self, steps: workflow.Steps, connection: Any) -> Any:
        """Run ``steps`` in one transaction (``connection``: the caller's); their value."""

    def _json(self, value: Any, default: Any) -> Any:
        if value is None:
            return default
        return loads(value, default) if self.json_text else value

    @abstractmethod
    def _run_steps_sync(self, steps: workflow.Steps, connection: Any) -> Any:
        """The same on the caller's own sync connection, on the caller's thread."""

    def _composed(self, value: tuple[list[int], list[Row], list[Row]]) -> Composed:
        ids, rows, batch = value
        jobs = workflow.in_order(self._jobs(rows), ids)
        self._woke(j.queue for j in jobs if j.state is JobState.AVAILABLE)
        if batch:
            self._woke("*")  # a callback may have been released
        return Composed(jobs, self._batch(batch))

    async def compose(self, params: ComposeParams, connection: Any = None) -> Composed:
        """Insert a workflow, a batch or a batch's new members in one transaction (the
        caller's with ``connection``); unknown dependency ids raise, writing nothing."""
        return self._composed(await self._run_steps(workflow.compose(params), connection))

    def compose_sync(self, params: ComposeParams, connection: Any) -> Composed:
        return self._composed(self._run_steps_sync(workflow.compose(params), connection))

    def _batch(self, rows: list[Row]) -> BatchRow | None:
        if not rows:
            return None
        r = rows[0]
        return BatchRow(
            id=r["id"], open=bool(r["open"]), total=r["total"], completed=r["completed"],
            discarded=r["discarded"], cancelled=r["cancelled"], on_success=r["on_success"],
            on_complete=r["on_complete"], on_discard=r["on_discard"],
            created_at=ts(r["created_at"]) or ts(0.0),  # type: ignore[arg-type]
            finished_at=ts(r["finished_at"]), meta=self._json(r["meta"], {}))

    async def batch_close(self, batch_id: int) -> BatchRow | None:
        if not await self._write("batch_close", {"id": batch_id}):
            return None
        self._woke("*")  # closing may have finished it: its callbacks are ready
        return await self.batch_get(batch_id)  # as the finish trigger left it

    async def batch_get(self, batch_id: int) -> BatchRow | None:
        return self._batch(await self._read("batch_get", {"id": batch_id}))

    async def workflow_jobs(self, workflow_id: str) -> list[Job]:
        return self._jobs(await self._read("workflow_jobs", {"workflow_id": workflow_id}))

    async def batch_jobs(self, params: BatchJobsParams) -> list[Job]:
        return self._jobs(await self._read("batch_jobs", {
            "batch_id": params.batch_id, "after_id": params.after_id, "limit": params.limit}))

    async def workflow_edges(self, workflow_id: str) -> list[EdgeRow]:
        rows = await self._read("workflow_edges", {"workflow_id": workflow_id})
        return [EdgeRow(r["job_id"], r["depends_on"], r["on_failure"]) for r in rows]

    async def job_dependencies(self, job_id: int) -> list[DependencyRow]:
        rows = await self._read("job_dependencies", {"id": job_id})
        return [DependencyRow(id=r["id"], on_failure=r["on_failure"], task=r["task"],
                              state=r["state"], result=self._json(r["result"], None),
                              errors=self._json(r["errors"], []))
                for r in rows]

    async def batch_waited_on(self, job_id: int) -> int | None:
        rows = await self._read("job_callback_batch", {"id": job_id})
        return rows[0]["batch_id"] if rows else None
