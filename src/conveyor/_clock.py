"""The virtual clock of the testing toolkit (``conveyor.testing.VirtualClock``).

Virtual time is the real time plus an offset that only ``advance`` moves. The offset
lives in two places: here, for decisions Python makes (a unique key's time bucket),
and in the database of every app the clock is attached to, where each statement adds
it to the database clock (``_storage/clock.py``). So ``clock.advance(hours=1)`` makes
due what would be due in an hour, for every connection and every process that shares
the database, without sleeping and without patching ``datetime``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

#: Writes a new offset to one app's database: a sync and an async version.
SyncSink = Callable[[float], None]
AsyncSink = Callable[[float], Awaitable[None]]


class VirtualClock:
    """Example::

        clock = VirtualClock()
        app = Conveyor("sqlite:///t.db", clock=clock)
        remind.options(delay=3600).enqueue()
        clock.advance(hours=1)
        app.drain()          # the reminder runs now
    """

    def __init__(self) -> None:
        self._offset = 0.0
        self._lock = threading.Lock()
        self._sinks: list[tuple[SyncSink, AsyncSink]] = []

    def __repr__(self) -> str:
        return f"<VirtualClock {self.now().isoformat()} (+{self._offset:g}s)>"

    @property
    def offset(self) -> float:
        """Seconds the virtual time is ahead of the real time."""
        return self._offset

    def time(self) -> float:
        """Virtual unix time, in seconds (``time.time()`` plus the offset)."""
        return time.time() + self._offset

    def now(self) -> datetime:
        """Virtual time as an aware UTC datetime."""
        return datetime.fromtimestamp(self.time(), UTC)

    def _step(self, seconds: float, minutes: float, hours: float, days: float) -> float:
        values = (seconds, minutes, hours, days)
        if any(isinstance(v, bool) or not isinstance(v, int | float) for v in values):
            raise TypeError("advance() takes numbers of seconds, minutes, hours and days")
        step = float(seconds + 60 * minutes + 3600 * hours + 86400 * days)
        if not step >= 0 or step == float("inf"):
            raise ValueError(f"a clock only moves forward by a finite step, got {step!r}s")
        with self._lock:
            self._offset += step
            return self._offset

    def advance(self, seconds: float = 0, *, minutes: float = 0, hours: float = 0,
                days: float = 0) -> datetime:
        """Move virtual time forward and tell every attached app's database; returns
        the new virtual now. In async code use ``await clock.advance_async(...)``."""
        offset = self._step(seconds, minutes, hours, days)
        for write, _ in list(self._sinks):
            write(offset)
        return self.now()

    async def advance_async(self, seconds: float = 0, *, minutes: float = 0,
                            hours: float = 0, days: float = 0) -> datetime:
        """``advance`` on the running event loop's connections."""
        offset = self._step(seconds, minutes, hours, days)
        for _, write in list(self._sinks):
            await write(offset)
        return self.now()

    # -- for the app -----------------------------------------------------------------------

    def attach(self, write: SyncSink, write_async: AsyncSink) -> Callable[[], None]:
        """Call these with every new offset; returns the detach function."""
        pair = (write, write_async)
        self._sinks.append(pair)
        return lambda: self._sinks.remove(pair)

    def adopt(self, offset: float) -> None:
        """Take a larger offset found in a database (another process advanced it)."""
        with self._lock:
            self._offset = max(self._offset, float(offset))
