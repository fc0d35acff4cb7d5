"""One lifecycle for every background service: ``start()`` once before the worker
takes jobs, ``run_once()`` on an interval with jitter, ``stop()`` once at the end."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import random
from typing import Any, Protocol

log = logging.getLogger("conveyor.service")


class Leadership(Protocol):
    """Whether this node leads now (services that act for the cluster ask it)."""

    @property
    def is_leader(self) -> bool: ...


class Service(abc.ABC):
    """Subclasses set ``name`` and ``interval`` and implement ``run_once``; tests call
    ``run_once()`` directly. A failing pass is logged and retried next interval."""

    name = "service"
    interval = 1.0
    #: The worker needs this service's first pass before it takes jobs (the node's row,
    #: the leadership, queue settings): ``start()`` runs it, and ``run()`` waits an
    #: interval before the next instead of repeating it at once.
    runs_at_start = False
    _kicked: asyncio.Event | None = None

    async def start(self) -> None:
        """Prepare before the worker takes jobs: the first pass where ``runs_at_start``,
        else nothing."""
        if self.runs_at_start:
            await self.run_once()

    @abc.abstractmethod
    async def run_once(self) -> Any:
        """One pass; every service defines it."""

    async def stop(self) -> None:
        """Clean up after the last pass (most services need nothing)."""
        return None

    def kick(self) -> None:
        """Run the next pass now instead of at the end of the interval."""
        if self._kicked is not None:
            self._kicked.set()

    async def run(self, stopping: asyncio.Event) -> None:
        failures = 0
        self._kicked = kicked = asyncio.Event()
        passed = self.runs_at_start  # start() just ran a pass
        while not stopping.is_set():
            kicked.clear()
            if not passed:
                try:
                    await self.run_once()
                    failures = 0
                except Exception as exc:
                    failures += 1
                    log.warning("%s pass failed (%s): %s", self.name, type(exc).__name__, exc)
            passed = False
            delay = self.interval * random.uniform(0.9, 1.1) * min(2**failures, 8)
            waits = [asyncio.ensure_future(stopping.wait()), asyncio.ensure_future(kicked.wait())]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait(waits, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
            for waiter in waits:
                waiter.cancel()
