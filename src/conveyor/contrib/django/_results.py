"""Conveyor jobs as Django ``TaskResult``s: the state mapping, errors and attempts.

Django has four statuses, Conveyor seven states. The mapping (docs/django.md):

=============  ==========  ========================================================
Conveyor       Django      why
=============  ==========  ========================================================
scheduled      READY       waits for ``run_after`` (or a snooze); it will run
available      READY       ready to run
retryable      READY       an attempt failed and it will run again ("ready to be
                           executed again"); the failure is in ``errors``
running        RUNNING     a worker runs it
completed      SUCCESSFUL  returned; ``return_value`` is the stored result
discarded      FAILED      attempts spent, ``Discard``, unknown task, unfit args
cancelled      FAILED      it will never succeed; ``errors`` says it was cancelled
=============  ==========  ========================================================
"""

from __future__ import annotations

import builtins
import re
from datetime import datetime, timedelta
from typing import Any

from django.tasks import Task, TaskResult, TaskResultStatus
from django.tasks.base import TaskError

from conveyor import Job, JobState

STATUS: dict[JobState, TaskResultStatus] = {
    JobState.PENDING: TaskResultStatus.READY,
    JobState.SCHEDULED: TaskResultStatus.READY,
    JobState.AVAILABLE: TaskResultStatus.READY,
    JobState.RETRYABLE: TaskResultStatus.READY,
    JobState.RUNNING: TaskResultStatus.RUNNING,
    JobState.COMPLETED: TaskResultStatus.SUCCESSFUL,
    JobState.DISCARDED: TaskResultStatus.FAILED,
    JobState.CANCELLED: TaskResultStatus.FAILED,
}

#: Outcomes Conveyor records without a Python exception of the task's own.
CANCEL_PATH = "conveyor._errors.Cancel"
DISCARD_PATH = "conveyor._errors.Discard"
CONVEYOR_ERROR_PATH = "conveyor._errors.ConveyorError"
_DOTTED = re.compile(r"^[A-Za-z_][\w.]*$")


def exception_class_path(entry: dict[str, Any]) -> str:
    """The failing exception's ``module.QualName``, read from the stored traceback.

    Conveyor stores ``"Name: message"`` and the formatted traceback; Python writes the
    exception's line as ``module.QualName: message`` (builtins without the module), so
    the last line of the traceback that names the same class gives its full path.
    """
    error = str(entry.get("error", ""))
    name = error.split(":", 1)[0].strip()
    text = entry.get("traceback")
    if isinstance(text, str) and _DOTTED.match(name):
        for line in reversed(text.rstrip().splitlines()):
            head = line.split(":", 1)[0].strip()
            if line[:1].isspace() or not _DOTTED.match(head):
                continue
            if head == name or head.endswith("." + name):
                return head if "." in head else f"builtins.{head}"
    if error.startswith("cancelled"):
        return CANCEL_PATH
    if error.startswith("discarded:"):
        return DISCARD_PATH
    if _DOTTED.match(name) and isinstance(getattr(builtins, name, None), type):
        return f"builtins.{name}"  # e.g. the TimeoutError of a task past its timeout
    return CONVEYOR_ERROR_PATH  # unknown task, unfit arguments, a lost lease


def task_errors(job: Job) -> list[TaskError]:
    """One ``TaskError`` per failed attempt; a cancel that ran nothing gets one too."""
    errors = [
        TaskError(exception_class_path=exception_class_path(entry),
                  traceback=str(entry.get("traceback") or entry.get("error", "")))
        for entry in job.errors if isinstance(entry, dict)
    ]
    if job.state is JobState.CANCELLED and not errors:
        errors.append(TaskError(exception_class_path=CANCEL_PATH,
                                traceback="cancelled before it ran (app.cancel_job)"))
    return errors


def worker_ids(job: Job) -> list[str]:
    """The node of each attempt so far (``len`` is Django's ``attempts``)."""
    by_attempt = {e.get("attempt"): str(e.get("node", "")) for e in job.errors
                  if isinstance(e, dict)}
    latest = job.lease_owner or job.ran_on or ""
    return [by_attempt.get(n) or (latest if n == job.attempt else "")
            for n in range(1, job.attempt + 1)]


def _first_start(job: Job) -> datetime | None:
    """When the first attempt started: its error's time less its run time, when the
    first attempt failed; else the latest attempt's start."""
    for entry in job.errors:
        if isinstance(entry, dict) and entry.get("attempt") == 1:
            try:
                at = datetime.fromisoformat(str(entry["at"]))
                return at - timedelta(seconds=float(entry.get("run_time") or 0))
            except (KeyError, TypeError, ValueError):
                break
    return job.attempted_at


def to_result(task: Task[Any, Any], job: Job, backend: str) -> TaskResult[Any, Any]:
    """The ``TaskResult`` of ``job`` (``task`` already carries the job's options)."""
    status = STATUS[job.state]
    result: TaskResult[Any, Any] = TaskResult(
        task=task,
        id=str(job.id),
        status=status,
        enqueued_at=job.created_at,
        started_at=_first_start(job) if job.attempt else None,
        finished_at=job.finished_at if job.state.is_final else None,
        last_attempted_at=job.attempted_at,
        args=list(job.args),
        kwargs=dict(job.kwargs),
        backend=backend,
        errors=task_errors(job),
        worker_ids=worker_ids(job),
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", job.result)
    return result
