"""Inserting workflows and batches: the statements in order, once for both backends.

Sans-IO like ``unique.py``: a generator yields ``(statement name, values)`` and gets the
rows back; each backend runs the steps in one transaction (its own, or the caller's).
Values hold plain lists: ``{"ids": [...]}`` for an id list, ``{"rows": [...]}`` for
rows inserted together; each backend shapes them (arrays, JSON text, one per row).

Why the order: existing dependencies are locked and flagged first (a dependency that
finishes concurrently is then either final here or settles the new edges), the new
jobs go in ``pending`` holding one extra count, then their edges, then the jobs whose
dependency already failed under the "cancel" policy are cancelled (cascading through
the settle trigger) and the extra count is dropped, which releases the jobs whose
dependencies were all final already (the release trigger, results included).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from typing import Any

from .._errors import BatchClosedError, BatchNotFoundError, UnknownDependencyError
from .._job import FINAL_STATES, Job
from .job_types import JobInsert
from .workflow_types import BatchAddParams, BatchCreateParams, WorkflowInsertParams, WorkflowNode

Rows = list[Mapping[str, Any]]
Step = tuple[str, dict[str, Any]]
Steps = Generator[Step, Rows, Any]
_FAILED = frozenset({"discarded", "cancelled"})
#: Callback kinds of a batch, in the order they are inserted.
CALLBACKS = ("on_success", "on_complete", "on_discard")


def job_row(job: JobInsert, **extra: Any) -> dict[str, Any]:
    """One row of ``workflow_insert_jobs`` (the backend converts run_at)."""
    row = {"task": job.task, "queue": job.queue, "args": job.args_json,
           "kwargs": job.kwargs_json, "priority": job.priority,
           "max_attempts": job.max_attempts, "tags": job.tags_json, "meta": job.meta_json,
           "delay": job.delay, "run_at": job.run_at, "concurrency_key": job.concurrency_key,
           "workflow_id": None, "batch_id": None, "deps_pending": 0, "followers": False,
           "results_arg": None, "callback_batch_id": None, "requires": job.requires_json}
    row.update(extra)
    return row


def insert_nodes(nodes: Sequence[WorkflowNode], workflow_id: str | None,
                 batch_id: int | None = None) -> Generator[Step, Rows, list[int]]:
    """Insert ``nodes`` with their edges; returns the new ids in node order."""
    if not nodes:
        return []
    external = sorted({d.ref for n in nodes for d in n.deps if not d.new})
    states: dict[int, str] = {}
    if external:
        locked = yield "workflow_lock_deps", {"ids": external}
        states = {int(r["id"]): str(r["state"]) for r in locked}
        if missing := [i for i in external if i not in states]:
            archived = yield "workflow_archived_deps", {"ids": missing}
            states.update((int(r["id"]), str(r["state"])) for r in archived)
        if missing := [i for i in external if i not in states]:
            raise UnknownDependencyError(missing)
    has_dependents = {d.ref for n in nodes for d in n.deps if d.new}
    rows, doomed, held = [], [], []
    for i, node in enumerate(nodes):
        waiting = sum(1 for d in node.deps if d.new or states[d.ref] not in FINAL_STATES)
        if node.deps:
            held.append(i)
            if any(not d.new and states[d.ref] in _FAILED and d.on_failure == "cancel"
                   for d in node.deps):
                doomed.append(i)
        rows.append(job_row(
            node.job, workflow_id=workflow_id, batch_id=batch_id,
            deps_pending=waiting + (1 if node.deps else 0),
            followers=i in has_dependents or batch_id is not None,
            results_arg=node.results_arg))
    ids = [int(r["id"]) for r in (yield "workflow_insert_jobs", {"rows": rows})]
    edges = [{"job_id": ids[i], "depends_on": ids[d.ref] if d.new else d.ref,
              "on_failure": d.on_failure,
              "settled": not d.new and states[d.ref] in FINAL_STATES}
             for i, node in enumerate(nodes) for d in node.deps]
    if edges:
        yield "workflow_insert_deps", {"rows": edges}
    if doomed:
        yield "workflow_cancel", {"ids": [ids[i] for i in doomed]}
    if held:
        yield "workflow_release_held", {"ids": [ids[i] for i in held]}
    return ids


ComposeParams = WorkflowInsertParams | BatchCreateParams | BatchAddParams


def compose(params: ComposeParams) -> Steps:
    """The steps of one insert, ending by reading back the jobs it inserted (their
    states may have moved already: released or cancelled in the same transaction);
    their value is (ids, their rows, the batch's row or none)."""
    batch_id: int | None = None
    if isinstance(params, WorkflowInsertParams):
        ids = yield from insert_nodes(params.nodes, params.workflow_id)
    elif isinstance(params, BatchCreateParams):
        batch_id, ids = yield from batch_create(params)
    elif isinstance(params, BatchAddParams):
        batch_id, ids = yield from batch_add(params)
    else:
        raise TypeError(f"cannot insert {type(params).__name__}")
    rows = (yield "workflow_jobs_by_ids", {"ids": ids}) if ids else []
    batch = (yield "batch_get", {"id": batch_id}) if batch_id is not None else []
    return ids, rows, batch


def batch_create(params: BatchCreateParams) -> Generator[Step, Rows, tuple[int, list[int]]]:
    """The batch row, its callbacks (pending until it settles), then its members."""
    batch_id = int((yield "batch_insert", {"meta": params.meta_json})[0]["id"])
    kinds = [k for k in CALLBACKS if k in params.callbacks]
    callback_ids: dict[str, int | None] = dict.fromkeys(CALLBACKS)
    if kinds:
        rows = [job_row(params.callbacks[k], deps_pending=1, callback_batch_id=batch_id)
                for k in kinds]
        inserted = yield "workflow_insert_jobs", {"rows": rows}
        callback_ids.update(zip(kinds, (int(r["id"]) for r in inserted), strict=True))
        yield "batch_set_callbacks", {"id": batch_id, **callback_ids}
    ids = yield from insert_nodes(params.nodes, None, batch_id)
    yield "batch_grow", {"id": batch_id, "n": len(params.nodes), "open": params.open}
    return batch_id, ids


def batch_add(params: BatchAddParams) -> Generator[Step, Rows, tuple[int, list[int]]]:
    grown = yield "batch_grow", {"id": params.batch_id, "n": len(params.nodes), "open": True}
    if not grown:
        exists = yield "batch_get", {"id": params.batch_id}
        if not exists:
            raise BatchNotFoundError(f"no batch has id {params.batch_id}")
        raise BatchClosedError(f"batch {params.batch_id} is closed: no job can be added")
    return params.batch_id, (yield from insert_nodes(params.nodes, None, params.batch_id))


def in_order(jobs: list[Job], ids: Sequence[int]) -> list[Job]:
    by_id = {j.id: j for j in jobs}
    return [by_id[i] for i in ids]
