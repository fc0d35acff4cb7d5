"""Params and rows of edit and retry (``job_retry_edited``, ``job_edit_list``): an
operator's new arguments for a job, and the record each edit leaves."""

from __future__ import annotations

import dataclasses
from datetime import datetime


@dataclasses.dataclass(frozen=True, slots=True)
class JobEditParams:
    """New arguments for a job, already encoded (and sealed, for an encrypted task) by
    the app."""

    job_id: int
    args_json: str
    kwargs_json: str
    #: The interface that asked: "api", "cli", "dashboard".
    source: str
    #: Who, when the interface knows (the dashboard's user), else None.
    actor: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class JobEdit:
    """One edit of a job's arguments, oldest first in ``job_edit_list``."""

    at: datetime
    source: str
    actor: str | None
    args_before: list[object]
    kwargs_before: dict[str, object]
    args: list[object]
    kwargs: dict[str, object]
