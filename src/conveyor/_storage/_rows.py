"""Turning database rows into Job records, shared by both backends."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from .._job import Job, JobState
from ._protocol import JobInsert

#: The states the stager moves to available, one query each.
STAGED_STATES = (JobState.SCHEDULED, JobState.RETRYABLE)


def _ts(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value
    return datetime.fromtimestamp(float(value), UTC)


def job_from_row(row: Mapping[str, Any], json_text: bool) -> Job:
    """Build a Job from a row; ``json_text`` says JSON columns arrive as text (SQLite)."""

    def _js(value: Any, unreadable: Any = None) -> Any:
        if not json_text or value is None:
            return value
        try:
            return json.loads(value)
        except (ValueError, RecursionError):  # written around the API: never block the queue
            return unreadable

    scheduled = _ts(row["scheduled_at"])
    created = _ts(row["created_at"])
    assert scheduled is not None and created is not None
    return Job(
        id=int(row["id"]),
        task=row["task"],
        queue=row["queue"],
        args=_js(row["args"]),  # None when unreadable: the worker discards such a job
        kwargs=_js(row["kwargs"]),
        priority=int(row["priority"]),
        state=JobState(row["state"]),
        attempt=int(row["attempt"]),
        max_attempts=int(row["max_attempts"]),
        scheduled_at=scheduled,
        created_at=created,
        attempted_at=_ts(row["attempted_at"]),
        finished_at=_ts(row["finished_at"]),
        errors=_js(row["errors"], []),
        result=_js(row["result"]),
        tags=_js(row["tags"], []),
        meta=_js(row["meta"], {}),
        lease_owner=row["lease_owner"],
        lease_token=row["lease_token"],
        lease_expires_at=_ts(row["lease_expires_at"]),
        cancel_requested=bool(row["cancel_requested"]),
        unique_key=row["unique_key"],
        concurrency_key=row["concurrency_key"],
    )


def sort_for_claim(jobs: list[Job]) -> list[Job]:
    """RETURNING order is not guaranteed; run claimed jobs in claim order."""
    jobs.sort(key=lambda j: (-j.priority, j.scheduled_at, j.id))
    return jobs


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
) -> list[int]:
    """Put each key's live holder, marked duplicate, in the gaps; return gaps left (the
    holder finished in between, so the insert must be tried again)."""
    by_key = {j.unique_key: j for j in holders}
    for i, job in enumerate(jobs):
        if out[i] is None and job.unique_key in by_key:
            out[i] = dataclasses.replace(by_key[job.unique_key], duplicate=True)
    return [i for i, j in enumerate(out) if j is None]
