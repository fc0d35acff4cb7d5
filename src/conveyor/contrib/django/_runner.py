"""The worker side: Django tasks as Conveyor tasks, found by their module path.

A job enqueued through Django is named after its task's ``module_path``. A worker does
not know Django's tasks in advance (Django keeps no registry of them), so the app's
task table (``DjangoTasks``) imports a path the first time a job names it, and runs it
only if it is a ``django.tasks.Task``. Each run is wrapped the way Django wraps a
request: old or broken database connections are closed before and after it, and
Django's ``task_started`` / ``task_finished`` signals are sent.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, overload

from asgiref.sync import sync_to_async
from django.db import close_old_connections
from django.tasks import Task as DjangoTask
from django.tasks import TaskContext, TaskResult, TaskResultStatus
from django.tasks.base import TaskError
from django.tasks.signals import task_finished, task_started
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from conveyor import Conveyor, Job, Task, current_job
from conveyor._task_options import TaskOptions

from ._results import to_result

T = TypeVar("T")
log = logging.getLogger("conveyor.contrib.django")
Runner = Callable[..., Any]


class ConveyorBackend(Protocol):
    """What the runner needs of ``backend.ConveyorBackend`` (which imports this)."""

    alias: str
    max_attempts: int
    timeout: float | None

    def task_of(self, task: DjangoTask[Any, Any], job: Job) -> DjangoTask[Any, Any]: ...


def find_task(path: str) -> DjangoTask[Any, Any] | None:
    """The Django task at ``path`` (``module.qualname``), or None."""
    try:
        found = import_string(path)
    except (ImportError, ValueError):  # ValueError: a path without a dot
        return None
    except Exception:  # the module itself fails: the job is discarded as unknown
        log.exception("importing the Django task %r failed", path)
        return None
    return found if isinstance(found, DjangoTask) else None


def conveyor_task(app: Conveyor, task: DjangoTask[Any, Any], backend: ConveyorBackend
                  ) -> Task[Any, Any]:
    """A Conveyor task that runs ``task``, with its signature (less ``context``), so
    arguments that do not fit are refused at enqueue as Conveyor refuses them."""
    runner = _async_runner(task, backend) if inspect.iscoroutinefunction(task.func) \
        else _sync_runner(task, backend)
    signature = inspect.signature(task.func)
    params = list(signature.parameters.values())[1 if task.takes_context else 0:]
    runner.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    runner.__name__ = task.name
    options = TaskOptions(name=task.module_path, queue=task.queue_name, priority=task.priority,
                          max_attempts=backend.max_attempts, timeout=backend.timeout)
    return Task(app, runner, options)


def _running_result(task: DjangoTask[Any, Any], backend: ConveyorBackend
                    ) -> TaskResult[Any, Any]:
    """The running job as a TaskResult: what ``context.task_result`` holds."""
    job: Job = current_job().job
    return to_result(backend.task_of(task, job), job, backend.alias)


def _failed(result: TaskResult[Any, Any], exc: BaseException) -> None:
    import traceback

    kind = type(exc)
    result.errors.append(TaskError(exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
                                   traceback="".join(traceback.format_exception(exc))))
    object.__setattr__(result, "status", TaskResultStatus.FAILED)


def _sync_runner(task: DjangoTask[Any, Any], backend: ConveyorBackend) -> Runner:
    sender = type(backend)

    def run(*args: Any, **kwargs: Any) -> Any:
        close_old_connections()  # as Django does when a request starts and finishes
        try:
            result = _running_result(task, backend)
            task_started.send(sender=sender, task_result=result)
            lead: tuple[Any, ...] = (TaskContext(task_result=result),) if task.takes_context else ()
            try:
                value = normalize_json(task.call(*lead, *args, **kwargs))
            except BaseException as exc:
                _failed(result, exc)
                task_finished.send(sender=sender, task_result=result)
                raise
            object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
            object.__setattr__(result, "_return_value", value)
            task_finished.send(sender=sender, task_result=result)
            return value
        finally:
            close_old_connections()

    return run


def _async_runner(task: DjangoTask[Any, Any], backend: ConveyorBackend) -> Runner:
    sender = type(backend)
    # Django's async ORM runs queries through sync_to_async (thread-sensitive): the
    # connections to close live in that thread.
    close = sync_to_async(close_old_connections)

    async def run(*args: Any, **kwargs: Any) -> Any:
        await close()
        try:
            result = _running_result(task, backend)
            await task_started.asend(sender=sender, task_result=result)
            lead: tuple[Any, ...] = (TaskContext(task_result=result),) if task.takes_context else ()
            try:
                value = normalize_json(await task.acall(*lead, *args, **kwargs))
            except BaseException as exc:
                _failed(result, exc)
                await task_finished.asend(sender=sender, task_result=result)
                raise
            object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
            object.__setattr__(result, "_return_value", value)
            await task_finished.asend(sender=sender, task_result=result)
            return value
        finally:
            await close()

    return run


class DjangoTasks(dict[str, Task[Any, Any]]):
    """The app's task table: a name nobody registered is looked up as a Django task
    path on first use (the runtime reads the table with ``get`` only)."""

    def __init__(self, app: Conveyor, backend: ConveyorBackend) -> None:
        super().__init__()
        self._app, self._backend = app, backend

    @overload
    def get(self, key: str, default: None = None, /) -> Task[Any, Any] | None: ...

    @overload
    def get(self, key: str, default: Task[Any, Any] | T, /) -> Task[Any, Any] | T: ...

    def get(self, key: str, default: Any = None, /) -> Any:
        found = super().get(key)
        if found is None:
            task = find_task(key)
            if task is None:
                return default
            found = self[key] = conveyor_task(self._app, task, self._backend)
        return found
