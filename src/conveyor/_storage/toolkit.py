"""The testing toolkit's storage methods (``conveyor.testing``), kept apart from what
production runs: the virtual clock, claiming one chosen job (inline mode) and staging
waiting jobs early (``drain(include_scheduled=True)``).

Their statements live in ``<dialect>/testing.sql`` and are loaded on first use, so a
production app never reads them. ``BaseStorage`` inherits this class; it needs only the
storage's statements, its write and its wake-up.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from .._job import STAGED_STATES, Job
from .clock import testing_queries, virtual_queries
from .job_types import JobClaimOneParams, StagedJob
from .rows import job_from_row


class ToolkitStorage(ABC):
    """The testing toolkit's half of ``BaseStorage``; see ``Storage`` for each method."""

    dialect: ClassVar[str]
    json_text: ClassVar[bool]
    #: True once ``use_virtual_clock`` rewrote the statements.
    virtual_clock: bool = False
    #: ``{name: sql}``: the backend's statements (``schema.load_queries``).
    _q: dict[str, str]

    @abstractmethod
    async def _write(self, name: str, values: Mapping[str, Any]) -> list[Any]:
        """Run one named statement in its own write transaction (``BaseStorage``)."""

    @abstractmethod
    def _woke(self, queues: Iterable[str]) -> None:
        """Jobs may be ready in these queues (``BaseStorage``)."""

    def use_virtual_clock(self) -> None:
        """Measure time on the virtual clock (``clock.py``) from now on; before ``open``."""
        self._testing_sql()
        self._q = virtual_queries(self.dialect, self._q)
        self.virtual_clock = True

    def _testing_sql(self) -> None:
        """Load the toolkit's statements on first use: production never does."""
        if "job_claim_one" not in self._q:
            extra = testing_queries(self.dialect)
            self._q.update(virtual_queries(self.dialect, extra) if self.virtual_clock else extra)

    async def clock_join(self, offset: float) -> float:
        """Create the clock's table if needed and keep the larger of ``offset`` and the
        stored one (another process may have advanced it); the offset in force."""
        self._testing_sql()
        await self._write("clock_create", {})
        return float((await self._write("clock_raise", {"offset": offset}))[0]["offset_seconds"])

    async def clock_set(self, offset: float) -> float:
        """Advance the stored offset to ``offset`` (never back); the offset in force."""
        self._testing_sql()
        return float((await self._write("clock_raise", {"offset": offset}))[0]["offset_seconds"])

    async def job_claim_one(self, params: JobClaimOneParams) -> Job | None:
        self._testing_sql()
        rows = await self._write("job_claim_one", dataclasses.asdict(params))
        return job_from_row(rows[0], self.json_text) if rows else None

    async def job_stage_early(self, *, queue: str | None = None) -> list[StagedJob]:
        self._testing_sql()
        return await self._stage("job_stage_early", {"queue": queue})

    async def _stage(self, name: str, values: Mapping[str, Any]) -> list[StagedJob]:
        """Run staging statement ``name`` once per state jobs are staged from, and wake
        the queues of what it made available (the worker's stager and the toolkit's
        "run it now" share this)."""
        staged = []
        for previous in STAGED_STATES:
            for r in await self._write(name, {**values, "from_state": previous.value}):
                staged.append(StagedJob(r["id"], r["task"], r["queue"], r["attempt"], previous))
        self._woke(j.queue for j in staged)
        return staged
