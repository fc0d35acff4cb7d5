"""The public surface: exported names are pinned, and task signatures stay typed.

The typing checks run under ``mypy --strict`` (part of ``make test``): an expected
error marked ``type: ignore[...]`` that stopped being an error fails mypy as unused.
"""

from __future__ import annotations

from collections.abc import Coroutine
from pathlib import Path
from typing import Any, assert_type

import pytest

import conveyor
from conveyor import Conveyor, Job, Task, TaskWithOptions

EXPORTED = [
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


def test_exported_names_are_pinned() -> None:
    assert sorted(conveyor.__all__) == sorted(EXPORTED)
    for name in conveyor.__all__:
        assert getattr(conveyor, name) is not None
    public_modules = [n for n in dir(conveyor) if not n.startswith("_") and n not in EXPORTED]
    # Submodules that are meant to be imported by path, not names leaking from internals.
    assert set(public_modules) <= {"cli", "web", "otel", "contrib"}, public_modules


def test_enqueue_keeps_the_task_signature(tmp_path: Path) -> None:
    app = Conveyor(f"sqlite:///{tmp_path}/t.db")

    @app.task(queue="mail")
    async def send_email(to: str, subject: str) -> None: ...

    @app.task
    def resize(path: str, width: int = 800) -> dict[str, int]:
        return {"width": width}

    assert isinstance(send_email, Task)
    assert_type(send_email("a@b.c", "hi"), Coroutine[Any, Any, None]).close()
    assert_type(resize("/p"), dict[str, int])  # calling the task calls the function
    assert isinstance(resize.options(delay=1), TaskWithOptions)
    assert_type(resize.enqueue("/p", width=10), Job)
    resize.enqueue(1)  # type: ignore[arg-type]
    # a misspelt keyword is refused at runtime too, before anything is stored
    with pytest.raises(TypeError, match=r"arguments do not fit task 'send_email'.*'subject'"):
        send_email.enqueue("a@b.c", subjekt="x")  # type: ignore[call-arg]
    assert app.list_jobs(queue="mail") == []
    resize.options(priority=1).enqueue("/p", width="wide")  # type: ignore[arg-type]
    app.close()
