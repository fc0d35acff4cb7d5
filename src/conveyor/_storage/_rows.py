"""Turning database rows into Job records, shared by both backends."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from .._job import Job, JobState


def _ts(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value
    return datetime.fromtimestamp(float(value), UTC)


def job_from_row(row: Mapping[str, Any], json_text: bool) -> Job:
    """Build a Job from a row; ``json_text`` says JSON columns arrive as text (SQLite)."""

    def _js(value: Any) -> Any:
        return json.loads(value) if json_text and value is not None else value

    scheduled = _ts(row["scheduled_at"])
    created = _ts(row["created_at"])
    assert scheduled is not None and created is not None
    return Job(
        id=int(row["id"]),
        task=row["task"],
        queue=row["queue"],
        args=_js(row["args"]),
        kwargs=_js(row["kwargs"]),
        priority=int(row["priority"]),
        state=JobState(row["state"]),
        attempt=int(row["attempt"]),
        max_attempts=int(row["max_attempts"]),
        scheduled_at=scheduled,
        created_at=created,
        attempted_at=_ts(row["attempted_at"]),
        finished_at=_ts(row["finished_at"]),
        errors=_js(row["errors"]),
        result=_js(row["result"]),
        tags=_js(row["tags"]),
        meta=_js(row["meta"]),
        lease_owner=row["lease_owner"],
        lease_token=row["lease_token"],
        lease_expires_at=_ts(row["lease_expires_at"]),
        cancel_requested=bool(row["cancel_requested"]),
    )


def sort_for_claim(jobs: list[Job]) -> list[Job]:
    """RETURNING order is not guaranteed; run claimed jobs in claim order."""
    jobs.sort(key=lambda j: (-j.priority, j.scheduled_at, j.id))
    return jobs
