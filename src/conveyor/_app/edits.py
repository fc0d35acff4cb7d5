"""Edit and retry: an operator's new arguments for a job, checked and encoded as an
enqueue of its task would check and encode them, before anything is written.

When this app defines the job's task, the arguments must fit its signature, rich
values are encoded with its codec and an encrypted task's arguments are sealed again.
A task this app does not know takes any JSON arguments, except sealed ones: without
the task they cannot be sealed again, and an edit must never store them in the clear.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .. import _payload
from .._job import Job
from .._payload_crypt import sealed_key
from .._storage import JobEditParams
from .._task import JobSpec, Task
from .._task_options import EnqueueOptions

#: The longest name of who asked kept with an edit (a dashboard user's name).
MAX_ACTOR = 200


def edit_params(tasks: Mapping[str, Task[Any, Any]], max_payload_bytes: int, job: Job,
                args: Sequence[Any] | None, kwargs: Mapping[str, Any] | None,
                source: str, actor: str | None) -> JobEditParams:
    """The edit as storage takes it; raises TypeError/ValueError naming what is wrong
    (the job is untouched)."""
    if args is not None and (isinstance(args, str | bytes) or not isinstance(args, Sequence)):
        raise TypeError(f"args must be a list of arguments, got {type(args).__name__}")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise TypeError(f"kwargs must be a dict of keyword arguments, got {type(kwargs).__name__}")
    if kwargs is not None and not all(isinstance(k, str) for k in kwargs):
        raise TypeError("kwargs keys must be strings")
    if actor is not None and (not isinstance(actor, str) or not 0 < len(actor) <= MAX_ACTOR):
        raise ValueError(f"user must be a name of 1 to {MAX_ACTOR} characters")
    task = tasks.get(job.task)
    sealed = sealed_key(job.args, job.kwargs) is not None
    if sealed and (args is None or kwargs is None):
        raise ValueError(f"the arguments of job {job.id} are encrypted at rest: an edit "
                         "gives both args and kwargs (the stored ones are not shown)")
    if sealed and task is None:
        raise ValueError(f"job {job.id}'s arguments are encrypted at rest and this app does "
                         f"not define task {job.task!r}: edit it from an app that does, "
                         "so the new arguments are sealed too")
    new_args = list(job.args if args is None else args)
    new_kwargs = dict(job.kwargs if kwargs is None else kwargs)
    if task is None:
        args_json, kwargs_json = _payload.encode_arguments(
            job.task, new_args, new_kwargs, max_payload_bytes)
    else:
        task.check_arguments(new_args, new_kwargs)
        insert = JobSpec(task, tuple(new_args), new_kwargs, EnqueueOptions()).to_insert(
            max_payload_bytes)
        args_json, kwargs_json = insert.args_json, insert.kwargs_json
    return JobEditParams(job.id, args_json, kwargs_json, source, actor)
