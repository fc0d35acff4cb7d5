"""The recycler: a worker process that reached its memory bound or holds a sync handler
stuck past its hard time limit asks to be replaced (the bound on jobs finished is checked
where outcomes are written, ``Worker._on_flushed``, so that it is not overshot).

It only decides; ``Worker.recycle`` drains (as on SIGTERM, or at once for a hard limit)
and ``run_worker`` returns the reason, which the CLI turns into the "recycle me" exit
status its supervisor answers with a fresh process. Only started when one of the bounds
is configured: a plain worker pays nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import resource
import sys
from collections.abc import Callable

from .service import Service

log = logging.getLogger("conveyor.worker")

#: Resident memory is read every this many passes (a pass every 0.5 s: every 2 s).
MEMORY_EVERY = 4


def resident_bytes() -> int:
    """This process's resident set size now (/proc/self/statm), or its peak where
    there is no /proc (``ru_maxrss``: kilobytes on Linux, bytes on macOS)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)


@dataclasses.dataclass(slots=True)
class Overdue:
    """A sync handler whose soft timeout fired: its thread must end by ``deadline``
    (loop time), else the process is recycled at once."""

    job_id: int
    future: asyncio.Future[object]
    deadline: float


class Recycler(Service):
    """Checks the bounds every ``interval``; calls ``recycle(reason, at_once)`` once."""

    name = "recycler"

    def __init__(self, overdue: list[Overdue], recycle: Callable[[str, bool], None], *,
                 max_memory: int | None, interval: float = 0.5) -> None:
        self._overdue = overdue
        self._recycle = recycle
        self.max_memory = max_memory
        self.interval = interval
        self._passes = 0
        self.reason: str | None = None

    async def run_once(self) -> str | None:
        if self.reason is None or not self.reason.startswith("hard"):
            reason, at_once = self._check()
            if reason is not None:
                self.reason = reason
                self._recycle(reason, at_once)
        return self.reason

    def _check(self) -> tuple[str | None, bool]:
        stuck = self._stuck()
        if stuck is not None:
            return stuck, True
        if self.reason is not None:
            return None, False
        self._passes += 1
        if self.max_memory is not None and (self._passes - 1) % MEMORY_EVERY == 0:
            rss = resident_bytes()
            if rss >= self.max_memory:
                return (f"max_memory_per_child: resident memory {rss // 1024**2} MB "
                        f"(bound {self.max_memory // 1024**2} MB)"), False
        return None, False

    def _stuck(self) -> str | None:
        """A thread past its hard limit, after dropping the ones that ended."""
        if not self._overdue:
            return None
        self._overdue[:] = [o for o in self._overdue if not o.future.done()]
        now = asyncio.get_running_loop().time()
        late = [o.job_id for o in self._overdue if o.deadline <= now]
        if not late:
            return None
        return (f"hard time limit: sync handler of job(s) {', '.join(map(str, late))} "
                "still running past timeout + hard_timeout_grace")
