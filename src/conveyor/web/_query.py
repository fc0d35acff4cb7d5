"""Job filters as they travel in URLs and forms: parsed strictly, written back as
query strings for links (pagination, "view jobs", bulk confirmation)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from urllib.parse import urlencode

from starlette.exceptions import HTTPException

from .._app import JobFilter, search
from .._job import FAILED_STATES, MAX_ID, JobState

#: ``state=failed`` in a URL: retryable and discarded together.
STATE_CHOICES = [s.value for s in JobState] + ["failed"]
PAGE_SIZES = (25, 50, 100, 200)
MAX_TEXT = 200


@dataclasses.dataclass(frozen=True, slots=True)
class JobQuery:
    state: str = ""
    queue: str = ""
    task: str = ""
    tag: str = ""
    q: str = ""
    #: The search box's ``NAME=VALUE``: a keyword argument's value (``_app/search.py``).
    arg: str = ""
    error: str | None = None

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> JobQuery:
        def text(name: str) -> str:
            value = params.get(name, "").strip()
            return value if len(value) <= MAX_TEXT else ""

        state = params.get("state", "")
        # The error key may be empty (jobs that failed without a message): keep "".
        error = params.get("error")
        return cls(state=state if state in STATE_CHOICES else "", queue=text("queue"),
                   task=text("task"), tag=text("tag"), q=text("q"), arg=text("arg"),
                   error=error if error is not None and len(error) <= MAX_TEXT else None)

    def to_filter(self) -> JobFilter:
        states: tuple[JobState, ...] = ()
        if self.state == "failed":
            states = FAILED_STATES
        elif self.state:
            states = (JobState(self.state),)
        return JobFilter(states=states, queue=self.queue or None, task=self.task or None,
                         tag=self.tag or None, text=self.q or None, error_key=self.error,
                         args_contains=self.args_contains())

    def args_contains(self) -> str | None:
        """The search box's filter as JSON; a malformed one is a 400 (never dropped: a
        bulk action on the filter would then reach every job)."""
        if not self.arg:
            return None
        try:
            return search.check_args_contains(search.args_from_pairs([self.arg]))
        except ValueError as exc:
            raise HTTPException(400, f"bad argument search: {exc}") from None

    @property
    def empty(self) -> bool:
        return self == JobQuery()

    def params(self, **extra: str | int | None) -> dict[str, str]:
        out = {k: v for k, v in dataclasses.asdict(self).items() if v}
        if self.error is not None:
            out["error"] = self.error
        out.update({k: str(v) for k, v in extra.items() if v is not None and v != ""})
        return out

    def qs(self, **extra: str | int | None) -> str:
        """``?state=..&task=..`` (or empty), with extra parameters such as a cursor."""
        params = self.params(**extra)
        return "?" + urlencode(params) if params else ""

    def describe(self) -> str:
        parts = [f"{name} {value!r}" for name, value in (
            ("state", self.state), ("queue", self.queue), ("task", self.task),
            ("tag", self.tag), ("args containing", self.q), ("argument", self.arg))
            if value]
        if self.error is not None:
            parts.append(f"error {self.error!r}")
        return ", ".join(parts) or "all jobs"


#: The largest id or count a database column holds (a signed 64-bit integer).


def positive_int(value: str | None, default: int | None = None) -> int | None:
    """A whole number from 1 to ``MAX_ID``, else ``default`` (never an OverflowError:
    ``99999999999999999999`` is as invalid as ``abc``)."""
    text = (value or "").strip()
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        return default
    number = int(text)
    return number if 0 < number <= MAX_ID else default
