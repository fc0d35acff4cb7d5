"""Workflow builders: chain, group, chord and an arbitrary DAG (``Workflow``).

A part is a job (``task.job(...)``), or a ``chain``, ``group`` or ``chord`` of parts.
Each part has entry jobs (they wait on whatever the part is placed after) and exit
jobs (what comes next waits on them). Nothing is written here: ``app.enqueue_workflow``
turns a ``Workflow`` into jobs and edges and inserts them in one transaction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ._dependencies import FailurePolicy, check_policy, dependency_ids
from ._errors import WorkflowError
from ._job import Job
from ._task import JobSpec, Task, TaskWithOptions
from ._task_options import EnqueueOptions

#: The keyword argument a chord's callback receives its group's results in.
CHORD_RESULTS_ARG = "results"


Part = Any  # JobSpec | Chain | Group | Chord (checked by _parts)


def _parts(parts: Sequence[Any], what: str) -> tuple[Any, ...]:
    if not parts:
        raise WorkflowError(f"{what} needs at least one job")
    for part in parts:
        if not isinstance(part, JobSpec | Chain | Group | Chord):
            raise TypeError(f"{what} takes jobs built with task.job(...) or chain/group/chord, "
                            f"got {type(part).__name__}")
    return tuple(parts)


@dataclasses.dataclass(frozen=True, slots=True, init=False)
class Chain:
    """Each part waits on the one before. Example: ``chain(fetch.job(u), parse.job())``"""

    parts: tuple[Any, ...]

    def __init__(self, *parts: Any) -> None:
        object.__setattr__(self, "parts", _parts(parts, "chain"))


@dataclasses.dataclass(frozen=True, slots=True, init=False)
class Group:
    """Parts that run side by side. Example: ``group(*(resize.job(p) for p in paths))``"""

    parts: tuple[Any, ...]

    def __init__(self, *parts: Any) -> None:
        object.__setattr__(self, "parts", _parts(parts, "group"))


@dataclasses.dataclass(frozen=True, slots=True)
class Chord:
    """A group, then one callback that receives the group's results, in the group's
    order, as the keyword argument ``results`` (a list; see ``FailurePolicy``).

    The callback is a task (``total``, or ``total.options(...)``: it is called with
    ``results`` alone) or a job (``total.job(extra=1)``: ``results`` is added to its
    arguments, so its function gives ``results`` a default).

    Example: ``chord(group(a.job(1), a.job(2)), total)`` runs ``total(results=[..])``
    """

    group: Group
    callback: JobSpec

    def __post_init__(self) -> None:
        if not isinstance(self.group, Group):
            raise TypeError("chord(group(...), callback): the first part must be a group")
        if isinstance(self.callback, Task):
            object.__setattr__(self, "callback", JobSpec(self.callback, (), {},
                                                         EnqueueOptions()))
        elif isinstance(self.callback, TaskWithOptions):
            object.__setattr__(self, "callback", self.callback.bare_job())
        if not isinstance(self.callback, JobSpec):
            raise TypeError("chord(group(...), callback): the callback must be a task or "
                            "task.job(...)")
        if not self.callback.task.accepts(CHORD_RESULTS_ARG):
            raise WorkflowError(f"the chord callback {self.callback.task.name!r} must accept "
                                f"a keyword argument {CHORD_RESULTS_ARG!r}")


def _results_job(part: Any, results: str) -> JobSpec:
    if not isinstance(results, str) or not results.isidentifier():
        raise WorkflowError(f"results= names a keyword argument, got {results!r}")
    if isinstance(part, Task):
        part = JobSpec(part, (), {}, EnqueueOptions())
    elif isinstance(part, TaskWithOptions):
        part = part.bare_job()
    if not isinstance(part, JobSpec):
        raise WorkflowError("results= takes one job or task, not a chain, group or chord")
    if not part.task.accepts(results):
        raise WorkflowError(f"task {part.task.name!r} has no keyword argument {results!r}")
    return part


def chain(*parts: Any) -> Chain:
    return Chain(*parts)


def group(*parts: Any) -> Group:
    return Group(*parts)


def chord(header: Group, callback: JobSpec | Task[Any, Any] | TaskWithOptions[Any]) -> Chord:
    return Chord(header, callback)  # type: ignore[arg-type]  # a task becomes its job


@dataclasses.dataclass(slots=True)
class PlannedJob:
    """One job of a workflow: its spec, the indexes of the jobs it waits on (with their
    policy), the ids of existing jobs it waits on, and its results argument."""

    spec: JobSpec
    waits_on: dict[int, str] = dataclasses.field(default_factory=dict)
    waits_on_ids: dict[int, str] = dataclasses.field(default_factory=dict)
    results_arg: str | None = None
    name: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Ref:
    """What ``Workflow.add`` returns: the jobs that whatever depends on it waits on."""

    exits: tuple[int, ...]


class Workflow:
    """An arbitrary DAG of jobs, built from the same parts.

    Example::

        wf = Workflow()
        a = wf.add(fetch.job(url))
        b = wf.add(group(thumb.job(), ocr.job()), depends_on=[a])
        wf.add(publish.job(), depends_on=[a, b], on_failure="run")
        run = app.enqueue_workflow(wf)

    ``depends_on`` takes what ``add`` returned, names given with ``name=`` (before or
    after: a cycle is refused at enqueue), and existing jobs or their ids.
    """

    def __init__(self, *parts: Any, on_failure: FailurePolicy = "cancel") -> None:
        self.on_failure = check_policy(on_failure)
        self.jobs: list[PlannedJob] = []
        self._named: dict[str, tuple[int, ...]] = {}
        self._pending_names: list[tuple[tuple[int, ...], str, str]] = []
        for part in parts:
            self.add(part)

    def add(self, part: Any, *, depends_on: Sequence[Any] = (), name: str | None = None,
            on_failure: FailurePolicy | None = None, results: str | None = None) -> Ref:
        """Add a part; ``results="name"`` (a single job, or a bare task) passes the
        results of what it depends on, in dependency order, as that keyword argument."""
        policy = self.on_failure if on_failure is None else check_policy(on_failure)
        if results is not None:
            part = _results_job(part, results)
        if isinstance(depends_on, str | Ref | Job | int) or not isinstance(depends_on, Sequence):
            raise TypeError("depends_on takes a list (of add() results, names, jobs or ids)")
        entries, exits = self._place(part)
        if results is not None:
            self.jobs[entries[0]].results_arg = results
        for dep in depends_on:
            self._depend(entries, dep, policy)
        if name is not None:
            if not isinstance(name, str) or not name or name in self._named:
                raise WorkflowError(f"name must be a new non-empty string, got {name!r}")
            if len(exits) == 1:
                self.jobs[exits[0]].name = name
            self._named[name] = exits
        return Ref(exits)

    def _depend(self, entries: tuple[int, ...], dep: Any, policy: str) -> None:
        if isinstance(dep, Ref):
            for job in entries:
                for exit_ in dep.exits:
                    self.jobs[job].waits_on[exit_] = policy
        elif isinstance(dep, str):
            self._pending_names.append((entries, dep, policy))
        else:
            for dep_id in dependency_ids([dep]):
                for job in entries:
                    self.jobs[job].waits_on_ids[dep_id] = policy

    def _place(self, part: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Append ``part``'s jobs; its (entries, exits)."""
        if isinstance(part, JobSpec):
            self.jobs.append(PlannedJob(part))
            index = len(self.jobs) - 1
            return (index,), (index,)
        if isinstance(part, Group):
            placed = [self._place(p) for p in part.parts]
            return (tuple(i for e, _ in placed for i in e), tuple(i for _, x in placed for i in x))
        if isinstance(part, Chain):
            entries, exits = self._place(part.parts[0])
            for nxt in part.parts[1:]:
                n_entries, n_exits = self._place(nxt)
                self._depend(n_entries, Ref(exits), self.on_failure)
                exits = n_exits
            return entries, exits
        if isinstance(part, Chord):
            entries, exits = self._place(part.group)
            (cb,), _ = self._place(part.callback)
            self._depend((cb,), Ref(exits), self.on_failure)
            self.jobs[cb].results_arg = CHORD_RESULTS_ARG
            return entries, (cb,)
        raise TypeError(f"a workflow takes jobs built with task.job(...) or chain/group/chord, "
                        f"got {type(part).__name__}")

    def resolve(self) -> list[PlannedJob]:
        """The jobs with every name resolved; refuses unknown names and cycles."""
        for entries, dep, policy in self._pending_names:
            if dep not in self._named:
                raise WorkflowError(f"depends_on names {dep!r}, which no add(name=...) gave")
            for job in entries:
                for exit_ in self._named[dep]:
                    self.jobs[job].waits_on[exit_] = policy
        self._check_acyclic()
        return self.jobs

    def _check_acyclic(self) -> None:
        state = [0] * len(self.jobs)  # 0 new, 1 on the path, 2 done
        for start in range(len(self.jobs)):
            if state[start]:
                continue
            state[start] = 1
            stack = [(start, iter(self.jobs[start].waits_on))]
            while stack:
                node, deps = stack[-1]
                nxt = next(deps, None)
                if nxt is None:
                    state[node] = 2
                    stack.pop()
                elif state[nxt] == 1:
                    cycle = [self._label(n) for n, _ in stack] + [self._label(nxt)]
                    raise WorkflowError("the workflow has a cycle: " + " -> ".join(cycle))
                elif state[nxt] == 0:
                    state[nxt] = 1
                    stack.append((nxt, iter(self.jobs[nxt].waits_on)))

    def _label(self, index: int) -> str:
        job = self.jobs[index]
        return job.name or f"{job.spec.task.name}#{index}"
