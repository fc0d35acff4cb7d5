"""How a worker stops: a stop is asked for (SIGTERM or SIGINT, a recycle, burst mode's
empty queues), then the drain: no new claims, running jobs get ``shutdown_timeout`` to
finish, and those still running then go back to their queue without using an attempt.

A module apart from ``worker.py``, which keeps the assembly, the executions and
``run()``; ``Worker`` inherits this class, whose attributes are the worker's own."""

from __future__ import annotations

import asyncio
import logging

from .._config import WorkerConfig
from .._context import ShutdownSignal
from .acker import Acker
from .chunks import Chunker
from .execution import Execution
from .producer import Producer
from .stager import Stager

log = logging.getLogger("conveyor.worker")


class GracefulShutdown:
    """The stopping half of ``Worker``: ``request_stop``, ``recycle`` and the drain."""

    config: WorkerConfig
    shutdown_signal: ShutdownSignal
    chunker: Chunker | None
    producers: dict[str, Producer]
    acker: Acker
    stager: Stager
    recycled: str | None
    _stopping: asyncio.Event
    _services_stop: asyncio.Event
    _at_once: bool
    _claiming: list[asyncio.Task[None]]
    _executions: dict[int, Execution]

    def request_stop(self) -> None:
        """Stop fetching; running jobs get up to shutdown_timeout to finish."""
        if not self._stopping.is_set():
            log.info("stopping: no new jobs; waiting up to %ss for running ones",
                     self.config.shutdown_timeout)
            self._stopping.set()
            self.shutdown_signal.set()  # handlers see it now, not at shutdown_timeout
            if self.chunker is not None:  # gathering chunks run now, with what they have
                self.chunker.fire_all()
            for producer in self.producers.values():
                producer.wake()

    def recycle(self, reason: str, at_once: bool = False) -> None:
        """Stop to be replaced by a fresh process: drain as on SIGTERM, or, ``at_once``
        (a hard time limit), give every running job back now without using an attempt."""
        if self.recycled is None or at_once:
            log.warning("recycling this worker process (%s)", reason)
            self.recycled = reason
        self._at_once = self._at_once or at_once
        self.request_stop()

    async def _shutdown_when_stopping(self) -> None:
        await self._stopping.wait()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (0.0 if self._at_once else self.config.shutdown_timeout)
        if self._claiming:
            # A claim already on its way when the stop came starts its jobs after this
            # point; taken before it returned, the list below would miss them, and they
            # would stay "running" after the exit until a rescuer found them.
            await asyncio.wait(self._claiming, timeout=self.config.shutdown_timeout)
        running = [ex.task for ex in self._executions.values() if ex.task is not None]
        if running:
            _, late = await asyncio.wait(running, timeout=max(0.0, deadline - loop.time()))
            if late:
                log.warning("%d job(s) still running at the shutdown timeout; "
                            "returning them to the queue", len(late))
                for ex in list(self._executions.values()):
                    if ex.task in late:
                        ex.stop("shutdown")
                await asyncio.wait(late, timeout=5)
        await asyncio.sleep(0)
        self._services_stop.set()
        await self.acker.drain()

    async def _watch_burst(self) -> None:
        """Burst mode: stop once due jobs are staged and every queue stays empty: every
        producer's last look found nothing, after one more look each (woken once per
        quiet spell), and no look is still on its way (a slow claim may bring jobs)."""
        quiet, woken = 0, False
        while not self._stopping.is_set():
            await asyncio.sleep(0.05)
            busy = self._executions or self.acker.pending
            if busy or not all(p.idle for p in self.producers.values()):
                quiet, woken = 0, False
                continue
            if any(p.looking for p in self.producers.values()):
                quiet = 0
                continue
            if not woken:
                await self.stager.run_once()
                for producer in self.producers.values():
                    producer.wake()
                woken = True
            quiet += 1
            if quiet >= 4:
                self.request_stop()
