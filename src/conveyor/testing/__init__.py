"""The testing toolkit: assertions on enqueued jobs, a virtual clock, and (in
``conveyor.testing.pytest_plugin``, loaded by pytest on its own) fixtures that give
each test an isolated app. Inline mode and drain are methods of the app itself:
``with app.inline(): ...`` and ``app.drain()``. See docs/testing.md.

Example::

    from conveyor.testing import assert_enqueued

    def test_signup(conveyor_app):
        signup("ada@example.com")
        assert_enqueued(send_welcome, args=["ada@example.com"], queue="mail")
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .._app import Conveyor, DrainResult, Outcome
from .._clock import VirtualClock
from .._job import Job, JobState
from .._task import Task

__all__ = [
    "DrainResult",
    "Outcome",
    "VirtualClock",
    "assert_enqueued",
    "enqueued_jobs",
    "refute_enqueued",
]

#: Jobs read per page while looking for matches.
_PAGE = 1000
_UNSET: Any = object()


def _app_and_name(task: Task[Any, Any] | str, app: Conveyor | None) -> tuple[Conveyor, str]:
    if isinstance(task, Task):
        owner = task.enqueuer
        if app is None:
            if not isinstance(owner, Conveyor):
                raise TypeError(f"task {task.name!r} is not bound to a Conveyor app; pass app=")
            app = owner
        return app, task.name
    if isinstance(task, str):
        if app is None:
            raise TypeError("a task given by name needs app=")
        return app, task
    raise TypeError(f"expected a task or a task name, got {task!r}")


def enqueued_jobs(task: Task[Any, Any] | str | None = None, *, app: Conveyor | None = None,
                  queue: str | None = None, state: JobState | str | None = None) -> list[Job]:
    """Every job of ``task`` (or of every task, with ``app=``), oldest first, read
    through ``app.list_jobs``; ``state`` (default: any) and ``queue`` narrow it."""
    if task is None:
        if app is None:
            raise TypeError("enqueued_jobs() needs a task or app=")
        name = None
    else:
        app, name = _app_and_name(task, app)
    jobs: list[Job] = []
    before: int | None = None
    while True:
        page = app.list_jobs(task=name, queue=queue, state=state, limit=_PAGE, before_id=before)
        jobs += page
        if len(page) < _PAGE:
            return jobs[::-1]
        before = page[-1].id


def _matching(app: Conveyor, jobs: list[Job], args: Sequence[Any] | None,
              kwargs: Mapping[str, Any] | None, priority: int | None) -> list[Job]:
    # Encoded as enqueue stores them, so a UUID, Decimal or dataclass given here
    # matches its tagged JSON (compared raw, it never would: refute_enqueued would pass).
    # Through JSON too: dict keys become text, as in the row.
    want_args = None if args is None else json.loads(json.dumps(app.codec.encode(list(args))))
    want_kwargs = (None if kwargs is None
                   else json.loads(json.dumps(app.codec.encode(dict(kwargs)))))
    return [j for j in jobs
            if (want_args is None or j.args == want_args)
            and (want_kwargs is None or j.kwargs == want_kwargs)
            and (priority is None or j.priority == priority)]


def _describe(jobs: list[Job]) -> str:
    if not jobs:
        return "  (no jobs at all)"
    lines = [f"  #{j.id} {j.task}(args={j.args!r}, kwargs={j.kwargs!r}) queue={j.queue!r} "
             f"state={j.state.value} priority={j.priority}" for j in jobs[:20]]
    if len(jobs) > 20:
        lines.append(f"  ... and {len(jobs) - 20} more")
    return "\n".join(lines)


def _wanted(name: str, args: Any, kwargs: Any, queue: Any, priority: Any) -> str:
    parts = [f"args={list(args)!r}" if args is not None else "",
             f"kwargs={dict(kwargs)!r}" if kwargs is not None else "",
             f"queue={queue!r}" if queue is not None else "",
             f"priority={priority!r}" if priority is not None else ""]
    return f"{name}(" + ", ".join(p for p in parts if p) + ")"


def assert_enqueued(task: Task[Any, Any] | str, *, args: Sequence[Any] | None = None,
                    kwargs: Mapping[str, Any] | None = None, queue: str | None = None,
                    priority: int | None = None, state: JobState | str | None = None,
                    count: int | None = None, app: Conveyor | None = None) -> list[Job]:
    """Fail unless a job of ``task`` matching every given field was enqueued (exactly
    ``count`` of them, if given); returns the matches. ``args``/``kwargs`` compare as
    stored: encoded as enqueue encodes them (a UUID matches its tagged JSON). The
    failure lists what was enqueued instead."""
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
        raise ValueError(f"count must be an int >= 0, got {count!r}")
    app, name = _app_and_name(task, app)
    every = enqueued_jobs(name, app=app, state=state)
    found = _matching(app, [j for j in every if queue is None or j.queue == queue], args,
                      kwargs, priority)
    ok = len(found) == count if count is not None else bool(found)
    if not ok:
        wanted = _wanted(name, args, kwargs, queue, priority)
        how = f"exactly {count} job(s) of" if count is not None else "a job of"
        others = enqueued_jobs(app=app, state=state)
        raise AssertionError(
            f"expected {how} {wanted} to be enqueued, found {len(found)} matching.\n"
            f"Enqueued instead ({len(others)} job(s)):\n{_describe(others)}")
    return found


def refute_enqueued(task: Task[Any, Any] | str, *, args: Sequence[Any] | None = None,
                    kwargs: Mapping[str, Any] | None = None, queue: str | None = None,
                    priority: int | None = None, state: JobState | str | None = None,
                    app: Conveyor | None = None) -> None:
    """Fail if any job of ``task`` matching every given field was enqueued."""
    app, name = _app_and_name(task, app)
    found = _matching(app, [j for j in enqueued_jobs(name, app=app, state=state)
                            if queue is None or j.queue == queue], args, kwargs, priority)
    if found:
        raise AssertionError(
            f"expected no {_wanted(name, args, kwargs, queue, priority)} to be enqueued, "
            f"found {len(found)}:\n{_describe(found)}")
