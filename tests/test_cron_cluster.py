"""Cron once per tick on a cluster: several nodes on one database, on the virtual clock.

Two rules keep a tick to one job, and each is tested here on its own, so that breaking
either one fails a test even while the other still holds:

- the tick's unique key: schedulers that all read the schedule before any of them
  writes (a barrier after ``schedule_list``) each insert the same ticks; the database
  must keep one job per tick;
- leadership: of several nodes, exactly one holds the lease, and only its scheduler
  reads the schedules at all.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Any, cast

from conveyor import Conveyor
from conveyor._runtime.cron import CronScheduler
from conveyor._runtime.leader import LeaderElector
from conveyor._storage import Storage
from conveyor.testing import VirtualClock

from ._runtime_util import aio

NODES, TICKS = 3, 4


class WatchedStorage:
    """A node's storage that counts the scheduler's reads and, when given a barrier,
    holds each ``schedule_list`` until every node has read (so all of them see the same
    last tick and race on the insert)."""

    def __init__(self, inner: Storage, barrier: asyncio.Barrier | None) -> None:
        self._inner, self._barrier = inner, barrier
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def schedule_list(self, *args: Any, **kwargs: Any) -> Any:
        rows = await self._inner.schedule_list(*args, **kwargs)
        self.reads += 1
        if self._barrier is not None:
            await asyncio.wait_for(self._barrier.wait(), timeout=30)
        return rows


def _apps(db_url: str, clock: VirtualClock) -> list[Conveyor]:
    apps = [Conveyor(db_url, clock=clock) for _ in range(NODES)]
    for app in apps:
        @app.periodic(cron="* * * * *", name="minutely")
        def minutely() -> None:
            """Runs at every minute's tick."""
    return apps


async def _schedulers(apps: list[Conveyor], barrier: asyncio.Barrier | None,
                      leaders: list[LeaderElector | None]) -> list[tuple[CronScheduler,
                                                                         WatchedStorage]]:
    out = []
    for app, leader in zip(apps, leaders, strict=True):
        storage = WatchedStorage(await app.storage(), barrier)
        cron = CronScheduler(app.registry, cast(Storage, storage), leader)
        await cron.start()
        out.append((cron, storage))
    return out


async def _tick_jobs(app: Conveyor) -> collections.Counter[str]:
    jobs = await app.list_jobs_async(task="minutely", limit=1000)
    return collections.Counter(str(job.meta["tick"]) for job in jobs)


async def _close(apps: list[Conveyor]) -> None:
    for app in apps:
        await app.close_async()


def _one_per_tick(ticks: collections.Counter[str]) -> Callable[[], str]:
    return lambda: f"{sum(ticks.values())} jobs for {len(ticks)} ticks: {dict(ticks)}"


@aio
async def test_overlapping_schedulers_write_one_job_per_tick(db_url: str) -> None:
    """Three schedulers that all believe they lead (no elector) and all read the same
    last tick: only the unique key stands between them and three jobs per tick."""
    clock = VirtualClock()
    apps = _apps(db_url, clock)
    try:
        barrier = asyncio.Barrier(NODES)
        nodes = await _schedulers(apps, barrier, [None] * NODES)
        for _ in range(TICKS):
            await clock.advance_async(minutes=1)
            await asyncio.gather(*(cron.run_once() for cron, _ in nodes))
        assert all(storage.reads == TICKS for _, storage in nodes), "every node read each tick"
        ticks = await _tick_jobs(apps[0])
        assert len(ticks) == TICKS and set(ticks.values()) == {1}, _one_per_tick(ticks)()
    finally:
        await _close(apps)


@aio
async def test_only_the_leader_node_schedules(db_url: str) -> None:
    """Three nodes with electors: each round exactly one holds the lease, and only its
    scheduler reads the schedules; four ticks make four jobs."""
    clock = VirtualClock()
    apps = _apps(db_url, clock)
    try:
        electors = [LeaderElector(await app.storage(), f"node-{i}", ttl=300.0)
                    for i, app in enumerate(apps)]
        nodes = await _schedulers(apps, None, list(electors))
        for _ in range(TICKS):
            await clock.advance_async(minutes=1)
            for elector in electors:
                await elector.run_once()
            leading = [e.node_id for e in electors if e.is_leader]
            assert len(leading) == 1, f"nodes that believe they lead: {leading}"
            held = await apps[0].get_leader_async()
            assert held is not None and held.node_id == leading[0]
            await asyncio.gather(*(cron.run_once() for cron, _ in nodes))
        reads = {e.node_id: storage.reads for e, (_, storage) in zip(electors, nodes,
                                                                      strict=True)}
        assert sorted(reads.values()) == [0] * (NODES - 1) + [TICKS], (
            f"schedule reads per node (only the leader's scheduler may read): {reads}")
        ticks = await _tick_jobs(apps[0])
        assert len(ticks) == TICKS and set(ticks.values()) == {1}, _one_per_tick(ticks)()
    finally:
        await _close(apps)
