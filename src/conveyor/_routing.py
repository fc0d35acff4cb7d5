"""Routing: which worker may run a job (labels it requires, tasks a worker serves) and
which queue a task goes to when it names none (``Conveyor(routes=...)``).

The rules are checked here once, at registration or at a worker's start; the database
enforces them at every claim (``job_claim_route`` in the storage's SQL)."""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable, Mapping, Sequence

from ._config import check_labels
from ._payload import check_queue_name

#: A job requires at most this many labels (each bounded as a worker label is).
MAX_REQUIRES = 16
#: A router holds at most this many patterns (each at most 200 characters).
MAX_ROUTES = 1000


def check_requires(requires: object) -> dict[str, str] | None:
    """``requires=`` of a task or an enqueue: a dict of label keys to values, as worker
    labels are written (``--label gpu=a100``); ``{}`` and None mean "any worker"."""
    if requires is None:
        return None
    if not isinstance(requires, Mapping):
        raise TypeError(f"requires= takes a dict of str to str (worker labels), got "
                        f"{type(requires).__name__}")
    if len(requires) > MAX_REQUIRES:
        raise ValueError(f"requires= names {len(requires)} labels; at most {MAX_REQUIRES}")
    try:
        checked = check_labels(requires)
    except ValueError as exc:
        raise ValueError(f"requires=: {exc}") from None
    return checked or None


def requires_json(requires: Mapping[str, str] | None) -> str | None:
    """The stored form: a JSON object with sorted keys, or None (the plain paths)."""
    return json.dumps(dict(requires), sort_keys=True) if requires else None


def describe(requires: Mapping[str, str]) -> str:
    """``gpu=a100, region=eu``"""
    return ", ".join(f"{k}={v}" for k, v in sorted(requires.items()))


def satisfies(labels: Mapping[str, str], requires: Mapping[str, str] | None) -> bool:
    """A worker with ``labels`` may run a job that requires ``requires``."""
    return not requires or all(labels.get(k) == v for k, v in requires.items())


def check_task_filter(tasks: object, known: Iterable[str] | None = None) -> tuple[str, ...] | None:
    """``--tasks send_email,resize`` (or a list): the tasks a worker serves, each known
    to the app when ``known`` is given; None serves every task."""
    if tasks is None:
        return None
    if isinstance(tasks, str):
        tasks = [t.strip() for t in tasks.split(",") if t.strip()]
    if not isinstance(tasks, Sequence | frozenset | set) or isinstance(tasks, bytes):
        raise TypeError(f"tasks= takes a list of task names, got {type(tasks).__name__}")
    names = []
    for name in tasks:
        if not isinstance(name, str) or not name:
            raise TypeError(f"tasks= takes task names (non-empty strings), got {name!r}")
        names.append(name)
    if not names:
        raise ValueError("tasks= names no task: leave it out to serve every task")
    if known is not None:
        known_set = set(known)
        unknown = [n for n in names if n not in known_set]
        if unknown:
            raise ValueError(f"unknown task(s) {', '.join(map(repr, unknown))}; the app's tasks "
                             f"are: {', '.join(sorted(known_set)) or '(none)'}")
    return tuple(dict.fromkeys(names))


class Router:
    """Task-name patterns (fnmatch-style, first match wins, in the order given) to
    queue names. Example: ``Router({"reports.*": "slow", "mail.*": "mail"})``"""

    def __init__(self, routes: Mapping[str, str] | None = None) -> None:
        if routes is None:
            routes = {}
        if not isinstance(routes, Mapping):
            raise TypeError(f"routes= takes a dict of task-name patterns to queue names, got "
                            f"{type(routes).__name__}")
        if len(routes) > MAX_ROUTES:
            raise ValueError(f"routes= has {len(routes)} patterns; at most {MAX_ROUTES}")
        self.routes: dict[str, str] = {}
        for pattern, queue in routes.items():
            if not isinstance(pattern, str) or not pattern or len(pattern) > 200:
                raise ValueError(f"routes=: pattern {pattern!r} must be a non-empty string of "
                                 "at most 200 characters")
            try:
                check_queue_name(queue)
            except ValueError as exc:
                raise ValueError(f"routes=: pattern {pattern!r}: {exc}") from None
            self.routes[pattern] = queue
        self._compiled = [(re.compile(fnmatch.translate(p)), q) for p, q in self.routes.items()]

    def queue_for(self, task_name: str, default: str = "default") -> str:
        for pattern, queue in self._compiled:
            if pattern.match(task_name):
                return queue
        return default

    def __bool__(self) -> bool:
        return bool(self.routes)
