"""Job dependencies' rules: the failure policies and how ``depends_on`` is read, once
for ``task.options(depends_on=...)`` and the workflow builders."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args

from ._errors import WorkflowError
from ._job import Job

#: What a dependent does when a dependency ends discarded or cancelled:
#: ``"cancel"`` (the default) cancels it, and so its own dependents, in turn;
#: ``"run"`` runs it anyway (a failed dependency's entry in a chord's results is None);
#: ``"run_with_failure"`` runs it with the failure visible (in a chord's results the
#: entry is ``{"job_id", "state", "error"}``). The failed job's row is always readable.
FailurePolicy = Literal["cancel", "run", "run_with_failure"]
FAILURE_POLICIES: tuple[str, ...] = get_args(FailurePolicy)


def check_policy(policy: object) -> FailurePolicy:
    if policy not in FAILURE_POLICIES:
        raise WorkflowError(f"on_failure must be one of {FAILURE_POLICIES}, got {policy!r}")
    return policy  # type: ignore[return-value]


def dependency_ids(depends_on: object) -> tuple[int, ...]:
    """Job objects or positive ints, as ids; anything else is a TypeError."""
    if isinstance(depends_on, Job | int | str) or not isinstance(depends_on, Sequence):
        raise TypeError("depends_on takes a list of jobs or job ids")
    ids = []
    for dep in depends_on:
        if isinstance(dep, Job):
            ids.append(dep.id)
        elif isinstance(dep, int) and not isinstance(dep, bool) and dep > 0:
            ids.append(dep)
        else:
            raise TypeError(f"depends_on takes jobs or positive job ids, got {dep!r}")
    return tuple(dict.fromkeys(ids))
