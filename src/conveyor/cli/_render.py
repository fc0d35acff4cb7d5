"""Terminal output shared by the commands: rich consoles, JSON, state colours, times.

User data (arguments, errors, tracebacks, task and queue names) is always rendered as
plain text, never markup, and through ``safe``: a stored ESC, BEL, CR or bidi override
is printed as ``\\x1b``, never sent to the terminal. ``--json`` escapes them as JSON.
"""

from __future__ import annotations

import json
import os
import re
import sys
from datetime import datetime
from typing import Any

import click
from rich.console import Console
from rich.text import Text

from .._job import Job, JobState

STATES = [s.value for s in JobState]

#: C0 controls, DEL, C1 controls, and the bidi and line-separator format characters.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
#: Multi-line text (tracebacks) keeps its newlines and tabs.
_CONTROL_MULTILINE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
#: The same characters inside a JSON document made with ensure_ascii=False (C0 are
#: already escaped by json).
_JSON_RAW = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(value: object, *, multiline: bool = False) -> str:
    """``value`` as text a terminal shows as it is: every control character (ESC, BEL,
    CR, backspace...) and bidi override escaped as ``\\x1b`` / ``\\u202e``. The one
    helper for stored text the CLI prints and the worker's logs write."""
    text = value if isinstance(value, str) else str(value)
    return (_CONTROL_MULTILINE if multiline else _CONTROL).sub(_escape, text)


def safe_json(doc: str) -> str:
    """A JSON document with DEL, C1 and bidi characters escaped as ``\\u00XX`` (json
    escapes C0 itself), still the same JSON value."""
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", doc)


STATE_STYLES: dict[str, str] = {
    "pending": "bright_black",
    "scheduled": "cyan",
    "available": "blue",
    "running": "yellow",
    "completed": "green",
    "retryable": "magenta",
    "cancelled": "dim",
    "discarded": "red",
}


#: The width of output that goes to no terminal (a pipe, a file, a log): wide enough
#: that no table column or line is cut, where rich would assume 80 columns.
OFF_TERMINAL_WIDTH = 100_000


def to_terminal(*, stderr: bool = False) -> bool:
    stream = sys.stderr if stderr else sys.stdout
    isatty = getattr(stream, "isatty", None)
    return bool(isatty is not None and isatty())


def console(*, stderr: bool = False) -> Console:
    """A console bound to the current sys.stdout/stderr (CliRunner swaps them): the
    terminal's width on a terminal or an exported ``COLUMNS``; off a terminal (piped, in
    a log) nothing is cut, where rich would cut at 80 columns."""
    sized = to_terminal(stderr=stderr) or os.environ.get("COLUMNS", "").strip().isdigit()
    width = None if sized else OFF_TERMINAL_WIDTH
    return Console(stderr=stderr, highlight=False, soft_wrap=False, width=width)


def fits_terminal(out: Console) -> bool:
    """True when ``out`` has a terminal's width to fit (and to cut text at)."""
    return out.width < OFF_TERMINAL_WIDTH


def print_json(doc: Any) -> None:
    click.echo(safe_json(json.dumps(doc, indent=2, default=str, ensure_ascii=False)))


def state_text(state: JobState | str) -> Text:
    value = JobState(state).value
    return Text(value, style=STATE_STYLES.get(value, ""))


def when(value: datetime | None, *, short: bool = False) -> str:
    """Local time; ``short`` drops the year."""
    if value is None:
        return "-"
    return value.astimezone().strftime("%m-%d %H:%M:%S" if short else "%Y-%m-%d %H:%M:%S")


def plain(value: object, style: str = "") -> Text:
    """Stored text as a rich Text: never markup, control characters escaped."""
    return Text(safe(value), style=style)


def shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def compact(value: Any, limit: int = 60) -> str:
    return shorten(json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":")),
                   limit)


def last_error(job: Job) -> str:
    if not job.errors:
        return ""
    return str(job.errors[-1].get("error", ""))
