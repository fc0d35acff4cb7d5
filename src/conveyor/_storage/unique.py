"""The unique-insert merge, written once for every backend and every caller.

An insert of jobs with unique keys returns a row for each job that went in; a job whose
key a live job already holds gets that holder, marked ``duplicate``. The holder may
finish between the insert and the lookup, so the leftovers are tried again, a few
rounds at most. The loop is sans-IO: ``unique_insert`` yields ``(statement name,
values)`` and is sent back the Jobs that statement returned, so one implementation
serves the async pool, a caller's sync or async connection, and the SQLite thread.
``run_sync`` and ``run_async`` drive it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Any

from .._errors import ConveyorError
from .._job import Job
from .job_types import JobInsert

#: Insert rounds for unique jobs whose holder finishes between insert and lookup.
UNIQUE_ROUNDS = 3

#: Yields (statement name, its values), is sent the Jobs it returned.
Steps = Generator[tuple[str, Any], list[Job], list[Job]]
#: Builds a statement's values for a batch of jobs (the backend's parameter style).
Values = Callable[[Sequence[JobInsert]], Any]
#: Builds the holder lookup's values for the keys that were already held.
KeyValues = Callable[[list[str]], Any]


def unique_insert(jobs: Sequence[JobInsert], values: Values, key_values: KeyValues) -> Steps:
    """Run ``job_insert`` then ``job_get_unique`` until every job has its row."""
    todo = list(jobs)
    out: list[Job | None] = [None] * len(todo)
    for _ in range(UNIQUE_ROUNDS):
        if not todo:
            break
        got, missing = match_inserted(todo, (yield "job_insert", values(todo)))
        if missing:
            fill_duplicates(got, todo, (yield "job_get_unique", key_values(missing)))
        todo = _merge(out, got, todo)
    done = [job for job in out if job is not None]
    if len(done) != len(out):
        raise ConveyorError("unique enqueue kept racing with the key's holder; try again")
    return done


def run_sync(steps: Steps, run: Callable[[str, Any], list[Job]]) -> list[Job]:
    try:
        step = next(steps)
        while True:
            step = steps.send(run(*step))
    except StopIteration as stop:
        result: list[Job] = stop.value
        return result


async def run_async(steps: Steps, run: Callable[[str, Any], Awaitable[list[Job]]]) -> list[Job]:
    try:
        step = next(steps)
        while True:
            step = steps.send(await run(*step))
    except StopIteration as stop:
        result: list[Job] = stop.value
        return result


def match_inserted(
    jobs: Sequence[JobInsert], rows: Sequence[Job]
) -> tuple[list[Job | None], list[str]]:
    """Pair each requested job with its inserted row; a unique conflict leaves a gap.

    Rows come back in id order, which is the order of the request. Returns the pairing
    and the unique keys whose holders must be looked up.
    """
    inserted = iter(sorted(rows, key=lambda j: j.id))
    keys = {r.unique_key for r in rows if r.unique_key is not None}
    used: set[str] = set()
    out: list[Job | None] = []
    missing: list[str] = []
    for job in jobs:
        key = job.unique_key
        if key is None or (key in keys and key not in used):
            if key is not None:
                used.add(key)
            row = next(inserted)
            assert row.unique_key == key, "inserted rows out of request order"
            out.append(row)
        else:
            out.append(None)
            missing.append(key)
    return out, missing


def fill_duplicates(
    out: list[Job | None], jobs: Sequence[JobInsert], holders: Sequence[Job]
) -> None:
    """Put each key's live holder, marked duplicate, in the gaps (a gap stays when the
    holder finished in between: the insert is tried again)."""
    by_key = {j.unique_key: j for j in holders}
    for i, job in enumerate(jobs):
        if out[i] is None and job.unique_key in by_key:
            out[i] = dataclasses.replace(by_key[job.unique_key], duplicate=True)


def _merge(out: list[Job | None], got: list[Job | None],
           jobs: list[JobInsert]) -> list[JobInsert]:
    """Fill the still-empty slots of ``out`` in order; return the jobs to try again."""
    slots = [i for i, job in enumerate(out) if job is None]
    again = []
    for slot, job, spec in zip(slots, got, jobs, strict=True):
        out[slot] = job
        if job is None:
            again.append(spec)
    return again
