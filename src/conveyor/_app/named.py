"""Tasks by name, for interfaces that enqueue from outside Python (``conveyor enqueue``,
the HTTP API): one rule for both.

With an app that defines tasks (``known``), the name must be one of them and the job's
arguments are checked against the function's signature. Without (``conveyor enqueue``
without ``--app``, a dashboard serving a bare ``Conveyor(url)``), any valid task name is
accepted with any arguments: the workers' app decides. The stand-in task is never
registered on the app, so a request cannot change what the app knows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import _payload
from .._task import Task
from .._task_options import TaskOptions

if TYPE_CHECKING:
    from .app import Conveyor


class UnknownTaskError(ValueError):
    """The app defines tasks, and none has this name; ``known`` lists theirs."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name, self.known = name, known
        names = ", ".join(known) or "(none)"
        super().__init__(f"no task {name!r} in the app; known tasks: {names}")


def _accept_anything(*args: Any, **kwargs: Any) -> None:
    """Stands in for a task this process does not define."""


def task_by_name(app: Conveyor, name: object, *, known: bool) -> Task[Any, Any]:
    """The app's task ``name``; with ``known=False`` and no such task, a stand-in that
    takes any arguments (the name is still checked: ``ValueError``)."""
    task = app.tasks.get(name) if isinstance(name, str) else None
    if task is not None:
        return task
    if known:
        raise UnknownTaskError(str(name), sorted(app.tasks))
    checked = _payload.check_task_name(name)
    # its queue as the app's routes give it (Conveyor(routes=...)), as for a task it defines
    options = TaskOptions(name=checked, queue=app.router.queue_for(checked))
    return Task(app, _accept_anything, options, app.codec)
