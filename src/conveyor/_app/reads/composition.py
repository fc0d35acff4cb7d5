"""What the workflow page and the batch page show, read through ``Operations`` (the
app's ``get_workflow`` / ``get_batch`` and a keyset page of a batch's members): each
member with the actions its state allows. Drawing the workflow's graph is the
dashboard's (``web/_graph.py``); this gives it the jobs and edges."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ..._job import DISCARDABLE_FROM, FINAL_STATES, RETRYABLE_FROM, Job, JobState
from ..._redact import Redactor, mask
from ..composition import Batch, WorkflowEdge
from .jobs import arguments_preview, last_error

if TYPE_CHECKING:
    from ..operations import Operations

#: Jobs per page in the tables of both pages.
PAGE_SIZE = 50


@dataclasses.dataclass(frozen=True, slots=True)
class MemberRow:
    """A job in a workflow's or a batch's table, with the actions its state allows."""

    job: Job
    args: str
    error: str
    can_retry: bool
    can_cancel: bool


def member_row(job: Job, redact: Redactor) -> MemberRow:
    shown = redact(job)
    return MemberRow(shown, arguments_preview(shown), last_error(shown),
                     can_retry=job.state in RETRYABLE_FROM,
                     can_cancel=(job.state in (*DISCARDABLE_FROM, JobState.RUNNING)
                                 and not job.cancel_requested))


# -- a workflow ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class WorkflowView:
    id: str
    total: int
    counts: dict[str, int]
    finished: bool
    failed: bool
    #: Every job of the workflow as stored (the graph's nodes) and its edges.
    jobs: list[Job]
    edges: list[WorkflowEdge]
    rows: list[MemberRow]
    #: The table's state filter ("" for every state), its page (1-based) and pages.
    state: str
    page: int
    pages: int
    matching: int
    #: Jobs not final yet: what "cancel workflow" would stop.
    open_jobs: int

    @property
    def status(self) -> str:
        if not self.finished:
            return "running"
        return "failed" if self.failed else "completed"


async def workflow_view(ops: Operations, workflow_id: str, redact: Redactor, *,
                        state: str = "", page: int = 1) -> WorkflowView | None:
    info = await ops.get_workflow(workflow_id)
    if info is None:
        return None
    shown = [j for j in info.jobs if not state or j.state.value == state]
    pages = max(1, -(-len(shown) // PAGE_SIZE))
    page = min(max(page, 1), pages)
    rows = [member_row(j, redact) for j in shown[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]]
    counts = {s: n for s, n in info.counts.items() if n}
    return WorkflowView(info.id, len(info.jobs), counts, info.finished, info.failed,
                        info.jobs, info.edges, rows, state, page, pages, len(shown),
                        sum(1 for j in info.jobs if j.state not in FINAL_STATES))


# -- a batch ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Callback:
    kind: str
    job_id: int
    #: None when the callback's row was deleted (pruned or purged).
    row: MemberRow | None


@dataclasses.dataclass(frozen=True, slots=True)
class BatchView:
    batch: Batch
    callbacks: list[Callback]
    rows: list[MemberRow]
    #: Keyset paging in id order: ``after`` this page started after, ``next_after``
    #: the cursor of the next page (None: this is the last one).
    after: int
    next_after: int | None

    @property
    def status(self) -> str:
        """open (takes more jobs), running (closed, jobs left), succeeded (every job
        completed) or finished (some discarded or cancelled)."""
        b = self.batch
        if b.finished:
            return "finished" if b.discarded or b.cancelled else "succeeded"
        return "open" if b.open else "running"

    @property
    def counts(self) -> dict[str, int]:
        b = self.batch
        return {"total": b.total, "pending": b.pending, "completed": b.completed,
                "discarded": b.discarded, "cancelled": b.cancelled}


async def batch_view(ops: Operations, batch_id: int, redact: Redactor, *,
                     after: int = 0) -> BatchView | None:
    # The rows first: the counters are updated in the same transaction that makes a
    # job final, so counts read after them include every final row on the page.
    jobs = await ops.batch_jobs(batch_id, after, PAGE_SIZE + 1)
    batch = await ops.get_batch(batch_id)
    if batch is None:
        return None
    batch = dataclasses.replace(batch, meta=mask(batch.meta))
    more = len(jobs) > PAGE_SIZE
    jobs = jobs[:PAGE_SIZE]
    callbacks = []
    for kind in ("on_success", "on_complete", "on_discard"):
        job_id = getattr(batch, kind)
        if job_id is not None:
            job = await ops.get_job(job_id)
            callbacks.append(Callback(kind, job_id, None if job is None
                                      else member_row(job, redact)))
    return BatchView(batch, callbacks, [member_row(j, redact) for j in jobs], after,
                     jobs[-1].id if more else None)


__all__ = ["PAGE_SIZE", "BatchView", "Callback", "MemberRow", "WorkflowView",
           "batch_view", "member_row", "workflow_view"]
