"""The application core: the ``Conveyor`` app and the records its methods return.

One chain of classes, one file each, each with real methods: ``AppBase`` (base.py:
definitions, storage, the sync bridge) <- ``ResultsApp`` (results.py: waiting for jobs)
<- ``JobsApp`` (jobs.py: enqueue, jobs, workers) <- ``TasksApp`` (tasks.py: registering
tasks, types and periodic tasks) <- ``CompositionApp`` (composition.py:
workflows, batches, dependencies) <- ``ControlApp`` (control.py: schedules, queues,
cluster) <- ``MaintenanceApp`` (maintenance.py: every operator action,
prune and rescue now) <- ``TestingApp`` (testing.py: inline mode and drain) <-
``Conveyor`` (app.py: the sync twins, one line each). A chain and not parts held by
the app: the public API is one flat object (``app.get_job``), so parts would each need
a forwarding method per public one; each link uses only the links below it.

The records of storage and runtime that the interfaces handle (a job filter, counts,
health, metric points, migrations, a drain's result, the testing toolkit's throwaway
PostgreSQL databases) are re-exported here, so an interface never imports
``conveyor._storage`` or ``conveyor._runtime``.
"""

from typing import TYPE_CHECKING

from .._errors import ScheduleNotFoundError
from .._storage import (
    DbHealth,
    DepthPoint,
    FailureGroup,
    JobEdit,
    JobFilter,
    LeaderRow,
    LimiterHolder,
    LimiterRow,
    MetricPoint,
    MetricTotal,
    Migration,
    NodeRow,
    QueueRow,
    StateCount,
    Storage,
    create_database,
    drop_database,
)
from .app import Conveyor
from .composition import Batch, Dependency, WorkflowEdge, WorkflowInfo, WorkflowRun
from .control import QueueInfo, ScheduleInfo
from .limiters import Hold, Limiter
from .maintenance import BULK_ALLOWED_STATES, BULK_DEFAULT_STATES, bulk_filter, bulk_states
from .permits import Permit
from .search import SearchPage

if TYPE_CHECKING:
    from .._runtime.drain_result import DrainResult, Outcome


def __getattr__(name: str) -> object:
    """A drain's records on first use (PEP 562): ``import conveyor`` and an app that
    only enqueues never load the runtime's modules."""
    if name in ("DrainResult", "Outcome"):
        from .._runtime import drain_result

        return getattr(drain_result, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BULK_ALLOWED_STATES",
    "BULK_DEFAULT_STATES",
    "Batch",
    "Conveyor",
    "DbHealth",
    "Dependency",
    "DepthPoint",
    "DrainResult",
    "FailureGroup",
    "Hold",
    "JobEdit",
    "JobFilter",
    "LeaderRow",
    "Limiter",
    "LimiterHolder",
    "LimiterRow",
    "MetricPoint",
    "MetricTotal",
    "Migration",
    "NodeRow",
    "Outcome",
    "Permit",
    "QueueInfo",
    "QueueRow",
    "ScheduleInfo",
    "ScheduleNotFoundError",
    "SearchPage",
    "StateCount",
    "Storage",
    "WorkflowEdge",
    "WorkflowInfo",
    "WorkflowRun",
    "bulk_filter",
    "bulk_states",
    "create_database",
    "drop_database",
]
