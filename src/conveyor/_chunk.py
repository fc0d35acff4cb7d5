"""Chunks: a task whose handler takes many jobs' arguments in one call.

``@app.task(chunk=Chunk(size=100, wait=1.0))`` gathers up to ``size`` claimed jobs of
the task (waiting at most ``wait`` seconds after the first) and calls the handler once
with a list of ``ChunkJob``. The handler's calling convention, checked when the task is
defined: exactly one positional parameter without a default (the list), and no other
required parameter. It returns one result per job (a list as long as the one it got,
in the same order), raises to fail every job of the chunk, or returns a
``ChunkResult`` to fail some. Each job keeps its own attempts, retry policy, state,
result and events: a chunk is only how they are run.

Example::

    @app.task(chunk=Chunk(size=100, wait=1.0))
    def index(jobs: list[ChunkJob]) -> list[int]:
        return search.bulk_index([job.args[0] for job in jobs])

    index.enqueue(doc_id)          # each job is enqueued alone, with any JSON arguments
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any

#: The largest chunk: every job of a chunk is claimed, leased and heartbeated together.
MAX_CHUNK_SIZE = 10_000
#: The longest gathering wait, in seconds (leases run while a chunk gathers).
MAX_CHUNK_WAIT = 300.0


@dataclasses.dataclass(frozen=True, slots=True)
class Chunk:
    """How a chunk task gathers its jobs: at most ``size`` per call, waiting at most
    ``wait`` seconds after the first is claimed for the others to arrive."""

    size: int = 100
    wait: float = 1.0

    def __post_init__(self) -> None:
        size, wait = self.size, self.wait
        if isinstance(size, bool) or not isinstance(size, int):
            raise TypeError(f"Chunk(size=) takes an int, got {size!r}")
        if not 1 <= size <= MAX_CHUNK_SIZE:
            raise ValueError(f"Chunk(size=) must be between 1 and {MAX_CHUNK_SIZE}, got {size}")
        if isinstance(wait, bool) or not isinstance(wait, int | float):
            raise TypeError(f"Chunk(wait=) takes seconds (a number), got {wait!r}")
        if not 0 <= wait <= MAX_CHUNK_WAIT:  # also refuses nan
            raise ValueError(f"Chunk(wait=) must be between 0 and {MAX_CHUNK_WAIT:g} "
                             f"seconds, got {wait!r}")


@dataclasses.dataclass(frozen=True, slots=True)
class ChunkJob:
    """One job of a chunk, as the handler gets it: its id, its arguments (decoded as
    for any task) and its attempt number (1 on the first run)."""

    id: int
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    attempt: int


@dataclasses.dataclass(frozen=True, slots=True)
class ChunkResult:
    """What a chunk handler returns to fail some jobs and complete the others.

    ``failed`` maps a job id to the exception it fails with (its retry policy applies,
    as if its handler had raised it: ``Snooze``, ``Discard`` and ``Cancel`` work too);
    every other job of the chunk completes with ``results.get(job_id)`` (None when absent).

    Example: ``return ChunkResult(failed={job.id: ValueError("bad row")}, results={...})``
    """

    failed: Mapping[int, BaseException] = dataclasses.field(default_factory=dict)
    results: Mapping[int, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, value in (("failed", self.failed), ("results", self.results)):
            if not isinstance(value, Mapping):
                raise TypeError(f"ChunkResult({name}=) takes a mapping of job id to "
                                f"{'exception' if name == 'failed' else 'result'}, got {value!r}")
        for job_id, exc in self.failed.items():
            if not isinstance(exc, BaseException):
                raise TypeError(f"ChunkResult(failed=) maps job {job_id!r} to {exc!r}, "
                                "not to an exception")


def check_chunk_handler(task: str, fn: Callable[..., Any], chunk: object) -> Chunk:
    """Refuse, when the task is defined, a ``chunk=`` that is not a ``Chunk`` or a
    handler that cannot take the list of jobs (its one required positional parameter)."""
    if not isinstance(chunk, Chunk):
        raise TypeError(f"chunk= of task {task!r} takes a conveyor.Chunk(...), got {chunk!r}")
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return chunk  # a builtin that does not describe itself: called as documented
    kinds = inspect.Parameter
    positional = [p for p in params if p.kind in (kinds.POSITIONAL_ONLY,
                                                   kinds.POSITIONAL_OR_KEYWORD)]
    required = [p for p in params if p.default is p.empty
                and p.kind not in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD)]
    takes_list = (len(required) == 1 and required[0].kind in (kinds.POSITIONAL_ONLY,
                                                               kinds.POSITIONAL_OR_KEYWORD)
                  and positional[0] is required[0])
    if not takes_list:
        raise TypeError(
            f"the handler of chunk task {task!r} must take one positional parameter, the "
            f"list of jobs (conveyor.ChunkJob), and no other required one; it is "
            f"{task}{inspect.signature(fn)}. Example: def {task}(jobs: list[ChunkJob]) -> list")
    return chunk
