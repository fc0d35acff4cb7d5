"""Conveyor: a durable background job queue for Python.

Jobs live in a local SQLite file by default; point the same code at PostgreSQL and
any number of workers on any number of machines share one queue.

Example::

    from conveyor import Conveyor

    app = Conveyor("sqlite:///jobs.db")

    @app.task
    async def send_email(to: str, subject: str) -> None: ...

    send_email.enqueue("a@b.c", subject="hi")
"""

import importlib as _importlib
import typing as _typing

from ._errors import (
    BatchClosedError,
    BatchNotFoundError,
    Cancel,
    ConveyorError,
    DatabaseUnavailableError,
    Discard,
    InvalidStateError,
    JobCancelledError,
    JobDiscardedError,
    JobFailedError,
    JobNotFoundError,
    LimitExceeded,
    PayloadTooLargeError,
    ScheduleNotFoundError,
    SchemaError,
    Snooze,
    StorageFullError,
    Throttle,
    UnknownDependencyError,
    WaitTimeoutError,
    WorkflowError,
)
from ._version import __version__

if _typing.TYPE_CHECKING:
    from ._app import (
        Batch,
        Conveyor,
        Dependency,
        JobEdit,
        Limiter,
        Permit,
        QueueInfo,
        ScheduleInfo,
        SearchPage,
        WorkflowEdge,
        WorkflowInfo,
        WorkflowRun,
    )
    from ._chunk import Chunk, ChunkJob, ChunkResult
    from ._config import ConveyorConfig, WorkerConfig
    from ._context import JobContext, current_job
    from ._cron import Schedule
    from ._dependencies import FailurePolicy
    from ._explain import Explanation
    from ._hooks import StateChange
    from ._job import Job, JobState
    from ._limits import RateLimit, Unique
    from ._task import JobSpec, Task, TaskWithOptions
    from ._workflow import Chain, Chord, Group, Workflow, chain, chord, group

#: Public name -> the module that defines it, imported on first use (PEP 562): ``import
#: conveyor`` stays cheap (no worker, no storage, no driver), and ``conveyor --help`` with it.
_LAZY_MODULES: dict[str, tuple[str, ...]] = {
    "._app": ("Batch", "Conveyor", "Dependency", "JobEdit", "Limiter", "Permit", "QueueInfo", "ScheduleInfo",
              "SearchPage", "WorkflowEdge", "WorkflowInfo", "WorkflowRun"),
    "._chunk": ("Chunk", "ChunkJob", "ChunkResult"),
    "._config": ("ConveyorConfig", "WorkerConfig"),
    "._context": ("JobContext", "current_job"),
    "._cron": ("Schedule",),
    "._dependencies": ("FailurePolicy",),
    "._explain": ("Explanation",),
    "._hooks": ("StateChange",),
    "._job": ("Job", "JobState"),
    "._limits": ("RateLimit", "Unique"),
    "._task": ("JobSpec", "Task", "TaskWithOptions"),
    "._workflow": ("Chain", "Chord", "Group", "Workflow", "chain", "chord", "group"),
}
_LAZY = {name: module for module, names in _LAZY_MODULES.items() for name in names}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(module, __name__), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "Batch",
    "BatchClosedError",
    "BatchNotFoundError",
    "Cancel",
    "Chain",
    "Chord",
    "Chunk",
    "ChunkJob",
    "ChunkResult",
    "Conveyor",
    "ConveyorConfig",
    "ConveyorError",
    "DatabaseUnavailableError",
    "Dependency",
    "Discard",
    "Explanation",
    "FailurePolicy",
    "Group",
    "InvalidStateError",
    "Job",
    "JobCancelledError",
    "JobContext",
    "JobDiscardedError",
    "JobEdit",
    "JobFailedError",
    "JobNotFoundError",
    "JobSpec",
    "JobState",
    "LimitExceeded",
    "Limiter",
    "PayloadTooLargeError",
    "Permit",
    "QueueInfo",
    "RateLimit",
    "Schedule",
    "ScheduleInfo",
    "ScheduleNotFoundError",
    "SchemaError",
    "SearchPage",
    "Snooze",
    "StateChange",
    "StorageFullError",
    "Task",
    "TaskWithOptions",
    "Throttle",
    "Unique",
    "UnknownDependencyError",
    "WaitTimeoutError",
    "WorkerConfig",
    "Workflow",
    "WorkflowEdge",
    "WorkflowError",
    "WorkflowInfo",
    "WorkflowRun",
    "__version__",
    "chain",
    "chord",
    "current_job",
    "group",
]
