"""Params and rows of the workflow and batch methods of the storage protocol."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from .._job import Job
from .job_types import JobInsert


@dataclasses.dataclass(frozen=True, slots=True)
class WorkflowDep:
    """One dependency of a node: another node of the same insert (``new``, ``ref`` is its
    index) or an existing job (``ref`` is its id), and the failure policy of the edge."""

    ref: int
    new: bool
    on_failure: str = "cancel"


@dataclasses.dataclass(frozen=True, slots=True)
class WorkflowNode:
    job: JobInsert
    deps: tuple[WorkflowDep, ...] = ()
    #: The keyword argument that receives the dependencies' results (a chord callback).
    results_arg: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class WorkflowInsertParams:
    """Jobs and their dependencies, inserted in one transaction."""

    nodes: Sequence[WorkflowNode]
    workflow_id: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class BatchCreateParams:
    nodes: Sequence[WorkflowNode]
    #: Callback jobs by kind: ``on_success``, ``on_complete``, ``on_discard``.
    callbacks: dict[str, JobInsert]
    open: bool = False
    meta_json: str = "{}"


@dataclasses.dataclass(frozen=True, slots=True)
class BatchAddParams:
    batch_id: int
    nodes: Sequence[WorkflowNode]


@dataclasses.dataclass(frozen=True, slots=True)
class BatchJobsParams:
    """A page of a batch's members in id order: up to ``limit`` after ``after_id``."""

    batch_id: int
    after_id: int = 0
    limit: int = 100


@dataclasses.dataclass(frozen=True, slots=True)
class BatchRow:
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


@dataclasses.dataclass(frozen=True, slots=True)
class DependencyRow:
    """A job's dependency as stored: ``state`` None when the job was deleted."""

    id: int
    on_failure: str
    task: str | None
    state: str | None
    result: Any
    errors: list[dict[str, Any]]


@dataclasses.dataclass(frozen=True, slots=True)
class EdgeRow:
    job_id: int
    depends_on: int
    on_failure: str


@dataclasses.dataclass(frozen=True, slots=True)
class Composed:
    """What an insert of a workflow or batch wrote: the jobs, in the order given
    (callbacks not included), and the batch as it is now (None for a workflow)."""

    jobs: list[Job]
    batch: BatchRow | None
