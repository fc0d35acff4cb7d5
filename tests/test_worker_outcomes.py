"""A worker's written outcomes reach its outcome listeners (the metrics service) once per
ack flush, each with its attempt, and still make one state change per job for the
app's listeners; with nobody listening no event is built, and the metrics count the
same either way."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest

from conveyor import Conveyor, JobState, StateChange
from conveyor._runtime import Worker

from ._runtime_util import FAST, all_final, run_worker_until


@pytest.mark.parametrize("listening", [True, False])
def test_outcomes_reach_listeners_per_flush_and_events_per_job(
        app: Conveyor, listening: bool) -> None:
    changes: list[StateChange] = []
    if listening:
        app.on_state_change(changes.append)
    flushes: list[list[tuple[int, int, JobState]]] = []

    @app.task(max_attempts=1)
    async def work(i: int) -> int:
        if i % 4 == 3:
            raise ValueError(i)
        return i

    def listener(outcomes: Sequence[tuple[Any, Any]]) -> None:
        flushes.append([(attempt.job.id, ack.id, ack.state) for attempt, ack in outcomes])

    async def listen(worker: Worker) -> None:
        worker._storage.on_outcome(listener)

    async def main() -> None:
        jobs = await app.enqueue_many_async([work.job(i) for i in range(24)])
        config = dataclasses.replace(FAST, metrics_interval=0.05)
        worker = await run_worker_until(app, all_final(app), config=config, during=listen)
        assert len(flushes) <= worker.acker.flushes and all(flushes)
        written = [row for flush in flushes for row in flush]
        want = {job.id: JobState.DISCARDED if i % 4 == 3 else JobState.COMPLETED
                for i, job in enumerate(jobs)}
        assert sorted(written) == sorted((i, i, state) for i, state in want.items())
        outcomes = [(c.job_id, c.state) for c in changes if c.previous == JobState.RUNNING]
        assert sorted(outcomes) == (sorted(want.items()) if listening else [])
        assert all(c.source == "worker" and c.node == worker.node_id for c in changes
                   if c.previous == JobState.RUNNING)
        errors = [c.error for c in changes if c.state == JobState.DISCARDED]
        assert errors == (["ValueError: 3", "ValueError: 7", "ValueError: 11",
                           "ValueError: 15", "ValueError: 19", "ValueError: 23"]
                          if listening else [])
        totals = {m.metric: m.value for m in await _totals(app)}
        assert totals.get("completed") == 18 and totals.get("discarded") == 6
        await app.close_async()

    asyncio.run(main())


async def _totals(app: Conveyor) -> list[Any]:
    """The never-pruned metric totals of the task ``work`` (what ``/metrics`` reads)."""
    storage = await app.storage()
    rows = await storage.metrics_totals()
    return [r for r in rows if r.task.endswith("work") and r.queue == "default"]
