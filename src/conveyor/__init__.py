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

from ._app import (
    Batch,
    Conveyor,
    Dependency,
    QueueInfo,
    ScheduleInfo,
    ScheduleNotFoundError,
    WorkflowEdge,
    WorkflowInfo,
    WorkflowRun,
)
from ._config import ConveyorConfig, WorkerConfig
from ._context import JobContext, current_job
from ._cron import Schedule
from ._dependencies import FailurePolicy
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
    PayloadTooLargeError,
    SchemaError,
    Snooze,
    StorageFullError,
    Throttle,
    UnknownDependencyError,
    WaitTimeoutError,
    WorkflowError,
)
from ._explain import Explanation
from ._hooks import StateChange
from ._job import Job, JobState
from ._limits import RateLimit, Unique
from ._task import JobSpec, Task, TaskWithOptions
from ._workflow import Chain, Chord, Group, Workflow, chain, chord, group

__version__ = "0.1.0"

__all__ = [
    "Batch",
    "BatchClosedError",
    "BatchNotFoundError",
    "Cancel",
    "Chain",
    "Chord",
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
    "JobFailedError",
    "JobNotFoundError",
    "JobSpec",
    "JobState",
    "PayloadTooLargeError",
    "QueueInfo",
    "RateLimit",
    "Schedule",
    "ScheduleInfo",
    "ScheduleNotFoundError",
    "SchemaError",
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
