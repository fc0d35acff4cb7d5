"""Tasks that start at once: the executions of a worker and a producer's claim ahead."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

#: Python 3.12 added ``eager_start`` to ``asyncio.Task``.
_EAGER = sys.version_info >= (3, 12)


def spawn(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """A Task for ``coro``. On Python 3.12+ it starts eagerly: its first step runs
    now, with the new Task as ``asyncio.current_task()`` and in a copy of the caller's
    context (as ``create_task`` would run it later), so a job that completes without
    suspending never schedules a step, and a claim is on its way before the caller goes
    on. One that suspends goes on as any Task. On 3.11 (no eager start) it is
    ``create_task``'s Task, made without its two Python frames when no task factory is
    set. A task factory set on the loop is always used."""
    loop = asyncio.get_running_loop()
    if loop.get_task_factory() is not None:
        return loop.create_task(coro)
    if _EAGER:
        return asyncio.Task(coro, loop=loop, eager_start=True)  # type: ignore[call-arg,unused-ignore]
    return asyncio.Task(coro, loop=loop)
