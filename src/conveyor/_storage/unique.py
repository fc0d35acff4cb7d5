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
    """Run ``job_insert`` then ``job_get_unique`` until every job has its row. A job of
    ``Unique(on_conflict="replace")`` whose key is held goes to ``job_replace_unique``
    instead: one statement that gives a still-waiting holder its arguments and run time,
    or inserts the job anew when a claim started the holder meanwhile (PostgreSQL's
    upsert; on SQLite nothing runs between the two statements). Several jobs of one replacing key in one
    batch are one job, the last of them (``_collapse``)."""
    todo, alias = _collapse(jobs)
    out: list[Job | None] = [None] * len(todo)
    for _ in range(UNIQUE_ROUNDS):
        if not todo:
            break
        got, missing = match_inserted(todo, (yield "job_insert", values(todo)))
        if missing:
            replace = [j for j, row in zip(todo, got, strict=True)
                       if row is None and j.unique_replace]
            if replace:
                fill_duplicates(got, todo, (yield "job_replace_unique", values(replace)),
                                replaced=True)
            keep = [j.unique_key for j, row in zip(todo, got, strict=True)
                    if row is None and not j.unique_replace and j.unique_key is not None]
            if keep:
                fill_duplicates(got, todo, (yield "job_get_unique", key_values(keep)))
        todo = _merge(out, got, todo)
    done = [job for job in out if job is not None]
    if len(done) != len(out):
        raise ConveyorError("unique enqueue kept racing with the key's holder; try again")
    return done if alias is None else [_as_duplicate(done[i], dup) for i, dup in alias]


def _collapse(jobs: Sequence[JobInsert]
              ) -> tuple[list[JobInsert], list[tuple[int, bool]] | None]:
    """The jobs with one per replacing key (its last: the last arguments win), and for
    each job the index of the one that stands for it and whether that is another job
    (None: nothing collapsed)."""
    last = {j.unique_key: i for i, j in enumerate(jobs) if j.unique_replace}
    if len(last) == sum(1 for j in jobs if j.unique_replace):
        return list(jobs), None
    kept = [i for i, j in enumerate(jobs) if not j.unique_replace or last[j.unique_key] == i]
    position = {i: n for n, i in enumerate(kept)}
    alias = [(position[last[j.unique_key]], last[j.unique_key] != i) if j.unique_replace
             else (position[i], False) for i, j in enumerate(jobs)]
    return [jobs[i] for i in kept], alias


def _as_duplicate(job: Job, duplicate: bool) -> Job:
    return dataclasses.replace(job, duplicate=True) if duplicate and not job.duplicate else job


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
    out: list[Job | None], jobs: Sequence[JobInsert], holders: Sequence[Job],
    replaced: bool = False,
) -> None:
    """Put each key's live holder, marked duplicate, in the gaps (a gap stays when the
    holder finished in between: the insert is tried again). ``replaced``: the holders
    of replacing jobs' keys (only those gaps are theirs)."""
    by_key = {j.unique_key: j for j in holders}
    for i, job in enumerate(jobs):
        if out[i] is None and job.unique_key in by_key and job.unique_replace == replaced:
            row = by_key[job.unique_key]  # a replacing row says itself if it was inserted
            out[i] = row if replaced else dataclasses.replace(row, duplicate=True)


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
