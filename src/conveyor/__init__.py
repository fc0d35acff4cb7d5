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

from ._app import Conveyor, QueueInfo, ScheduleInfo, ScheduleNotFoundError
from ._config import ConveyorConfig, WorkerConfig
from ._context import JobContext, current_job
from ._cron import Schedule
from ._errors import (
    Cancel,
    ConveyorError,
    DatabaseUnavailableError,
    Discard,
    InvalidStateError,
    JobNotFoundError,
    PayloadTooLargeError,
    SchemaError,
    Snooze,
    StorageFullError,
    Throttle,
)
from ._explain import Explanation
from ._hooks import StateChange
from ._job import Job, JobState
from ._limits import RateLimit, Unique
from ._task import JobSpec, Task, TaskWithOptions

__version__ = "0.1.0"

__all__ = [
    "Cancel",
    "Conveyor",
    "ConveyorConfig",
    "ConveyorError",
    "DatabaseUnavailableError",
    "Discard",
    "Explanation",
    "InvalidStateError",
    "Job",
    "JobContext",
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
    "WorkerConfig",
    "__version__",
    "current_job",
]
