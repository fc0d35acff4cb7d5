"""Terminal output shared by the commands: rich consoles, JSON, state colours, times.

User data (arguments, errors, tracebacks) is always rendered as plain text, never markup.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import click
from rich.console import Console
from rich.text import Text

from .._job import Job, JobState

STATES = [s.value for s in JobState]

STATE_STYLES: dict[str, str] = {
    "scheduled": "cyan",
    "available": "blue",
    "running": "yellow",
    "completed": "green",
    "retryable": "magenta",
    "cancelled": "dim",
    "discarded": "red",
}


def console(*, stderr: bool = False) -> Console:
    """A console bound to the current sys.stdout/stderr (CliRunner swaps them)."""
    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def print_json(doc: Any) -> None:
    click.echo(json.dumps(doc, indent=2, default=str, ensure_ascii=False))


def state_text(state: JobState | str) -> Text:
    value = JobState(state).value
    return Text(value, style=STATE_STYLES.get(value, ""))


def when(value: datetime | None, *, short: bool = False) -> str:
    """Local time; ``short`` drops the year."""
    if value is None:
        return "-"
    return value.astimezone().strftime("%m-%d %H:%M:%S" if short else "%Y-%m-%d %H:%M:%S")


def shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def compact(value: Any, limit: int = 60) -> str:
    return shorten(json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":")),
                   limit)


def last_error(job: Job) -> str:
    if not job.errors:
        return ""
    return str(job.errors[-1].get("error", ""))
