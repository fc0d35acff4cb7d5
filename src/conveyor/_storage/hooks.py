"""The ground floor of the storage classes: what a backend supplies (its dialect's class
constants and how one named statement runs: ``_read``, ``_write``, ``_move`` ...) and
the few helpers every shared method builds on them (wake-ups, decoding rows into jobs).

``BaseStorage`` (``base.py``) inherits it and holds the shared job statements; this
class is apart so that a backend's author finds its whole contract in one place.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar

from .._job import Job, JobState
from .job_types import JobBulkParams, JobChanged, JobFilter
from .protocol import Capabilities
from .rows import job_from_row, jobs_from_rows
from .schema import load_queries
from .toolkit import ToolkitStorage
from .wake import WakeCallback, WakeHub

#: A database row read by column name (``sqlite3.Row`` or a psycopg dict row).
Row = Any


class BackendHooks(ToolkitStorage):
    """What a backend supplies to the shared storage classes, and the helpers on it."""

    #: "sqlite" or "postgres": picks the SQL files and names the capabilities.
    dialect: ClassVar[str]
    #: JSON columns arrive as text (SQLite) rather than decoded by the driver.
    json_text: ClassVar[bool]
    #: True when statements do not wake other producers themselves (no NOTIFY): the
    #: storage then tells the in-process hub which queues may have ready jobs.
    wake_locally: ClassVar[bool]
    #: The driver's error for a unique index violation (another live job holds the key).
    unique_violation: ClassVar[type[Exception]]

    def __init__(self, hub: WakeHub, poll_interval: float) -> None:
        self._hub = hub
        self._q = load_queries(self.dialect)
        self._capabilities = Capabilities(dialect=self.dialect, poll_interval=poll_interval,
                                          remote_finish_wakes=not self.wake_locally)

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    # -- what a backend supplies -------------------------------------------------------

    @abstractmethod
    async def _read(self, name: str, values: Mapping[str, Any]) -> list[Row]:
        """Run one named read-only statement; its rows."""

    @abstractmethod
    async def _write(self, name: str, values: Mapping[str, Any]) -> list[Row]:
        """Run one named statement in its own write transaction; its rows."""

    @abstractmethod
    def _time(self, value: datetime) -> Any:
        """A datetime as this backend's timestamp parameter."""

    @abstractmethod
    def _filter_values(self, f: JobFilter) -> dict[str, Any]:
        """A JobFilter as this dialect's statement parameters."""

    @abstractmethod
    async def _change_matching(self, params: JobBulkParams, allowed: Sequence[JobState],
                               update: str, extra: Mapping[str, Any]) -> list[JobChanged]:
        """Pick up to ``params.limit`` jobs in ``allowed`` states matching the filter and
        apply ``update`` to them, in one transaction; the jobs it changed."""

    @abstractmethod
    async def _move(self, pick: str, then: Sequence[str],
                    values: Mapping[str, Any]) -> tuple[list[Row], list[Row]]:
        """In one write transaction: run ``pick`` (its rows have an ``id``), then each of
        ``then`` with those ids as ``ids``; the picked rows and the last statement's rows
        (nothing runs after an empty pick). Rows move between the hot table and history
        this way."""

    # -- helpers -------------------------------------------------------------------------

    def _woke(self, queues: Iterable[str]) -> None:
        """Jobs may be ready in these queues ("*": any)."""
        if self.wake_locally:
            for queue in set(queues):
                self._hub.notify(queue)

    def _finished(self) -> None:
        """Jobs reached a final state: wake this process's waiters (where statements
        do not NOTIFY). Nobody waiting costs one attribute read."""
        if self.wake_locally and self._hub.finished.has_subscribers:
            self._hub.finished.notify("")

    def _jobs(self, rows: Iterable[Row]) -> list[Job]:
        """Decoded in one pass (column positions and timestamps worked out once, not per
        row): a workflow page reads 10,000 rows at a time."""
        rows = list(rows)
        if not rows:
            return []
        columns = list(rows[0].keys())
        values = ([list(r.values()) for r in rows] if isinstance(rows[0], dict)
                  else [tuple(r) for r in rows])
        return jobs_from_rows(columns, values, self.json_text)

    def _one(self, rows: list[Row]) -> Job | None:
        return job_from_row(rows[0], self.json_text) if rows else None

    def wake_subscribe(self, callback: WakeCallback) -> Callable[[], None]:
        return self._hub.subscribe(callback)

    def finish_subscribe(self, callback: WakeCallback) -> Callable[[], None]:
        return self._hub.finished.subscribe(callback)
