"""In-process regression tests for the core bugs the chaos scenarios found.

The scenarios themselves (real processes) are the end-to-end regression tests; these
pin each fix at the unit where it lives, in well under a second each.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any, cast

import pytest

from conveyor import JobState, WorkerConfig
from conveyor._context import JobContext
from conveyor._payload import encode_arguments, encode_result, storable
from conveyor._runtime.executor import Execution
from conveyor._runtime.heartbeat import Heartbeat
from conveyor._storage import (
    JobFetchAvailableParams,
    JobHeartbeatManyParams,
    JobHeartbeatResult,
    JobInsert,
    JobLease,
    WakeHub,
    create_storage,
)


def test_heartbeat_leaves_finished_executions_alone() -> None:
    """Scenario 1 logged "lease lost" for jobs that had just completed: their ack landed
    between the heartbeat's snapshot and its answer. A finished execution is the
    acker's business now; only the fence judges its write."""

    class Storage:
        async def node_upsert(self, params: object) -> None: ...

        async def job_heartbeat_many(self, params: JobHeartbeatManyParams) -> JobHeartbeatResult:
            return JobHeartbeatResult(frozenset(), frozenset())  # "not held any more"

    async def main() -> tuple[int, int]:
        from conveyor._job import Job

        job = Job(id=1, task="t", queue="q", args=[], kwargs={}, priority=0,
                  state=JobState.RUNNING, attempt=1, max_attempts=3,
                  scheduled_at=None, created_at=None, lease_token=7)  # type: ignore[arg-type]
        ex = Execution(job, JobContext(job))

        async def done() -> None:
            return None

        ex.task = asyncio.ensure_future(done())
        await ex.task
        beat = Heartbeat(cast(Any, Storage()), "node", {"q": 1}, lambda: [ex], 1.0, 5.0,
                         node_ttl=WorkerConfig().node_ttl)
        result: tuple[int, int] = await beat.run_once()
        assert ex.stop_reason is None and not ex.ctx.cancelled
        return result

    assert asyncio.run(main()) == (0, 0)


def test_results_and_errors_are_made_storable() -> None:
    """Scenario 12: a NUL or a lone surrogate in a result or an error failed the ack on
    every retry, and the acker retried that batch forever: the worker was wedged."""
    assert json.loads(encode_result({"k\x00": "a\x00b", "s": "x\ud800"}, 1 << 16)) == {
        "k\ufffd": "a\ufffdb", "s": "x\ufffd"}
    assert storable('"\\\\u0000"') == '"\\\\u0000"'  # an escaped backslash is not a NUL
    assert storable('"plain ascii"') == '"plain ascii"'
    for bad in ("nul \x00", "lone \ud800"):
        with pytest.raises(ValueError, match="NUL character or a lone surrogate"):
            encode_arguments("t", (bad,), {}, 1 << 20)


def test_too_deep_arguments_are_refused_as_not_serialisable() -> None:
    value: list[object] = []
    for _ in range(5000):
        value = [value]
    with pytest.raises(TypeError, match="argument #0 of task 't' is not JSON-serialisable"):
        encode_arguments("t", (value,), {}, 1 << 30)


def test_unreadable_rows_do_not_block_the_sqlite_queue(tmp_path: Path) -> None:
    """Scenario 12: one row with malformed JSON (or text that is not UTF-8) written
    around the API made every claim of its queue fail, forever."""
    url = f"sqlite:///{tmp_path / 'q.db'}"

    async def main() -> None:
        storage = create_storage(url, WakeHub())
        await storage.open()
        try:
            await storage.job_insert_many([JobInsert(
                task="t", queue="q", args_json="[1]", kwargs_json="{}", priority=0,
                max_attempts=1, tags_json="[]", meta_json="{}")])
            conn = sqlite3.connect(tmp_path / "q.db", isolation_level=None)
            conn.execute("UPDATE conveyor_jobs SET args = '[1, 2', tags = CAST(X'FF' AS TEXT)")
            conn.close()
            (job,) = await storage.job_fetch_available(
                JobFetchAvailableParams(queue="q", limit=5, owner="n", lease_ttl=30))
            assert job.args is None  # the executor discards it with a clear error
        finally:
            await storage.close()

    asyncio.run(main())


@pytest.mark.postgres
def test_heartbeats_get_through_a_starved_postgres_pool(pg_url: str) -> None:
    """Scenario 7: handlers holding every pooled connection starved the heartbeats, so
    leases expired under running jobs and other workers ran them again."""
    async def main() -> None:
        storage = create_storage(pg_url, WakeHub(), pool_max_size=1)
        await storage.open()
        try:
            await storage.job_insert_many([JobInsert(
                task="t", queue="q", args_json="[]", kwargs_json="{}", priority=0,
                max_attempts=1, tags_json="[]", meta_json="{}")])
            (job,) = await storage.job_fetch_available(
                JobFetchAvailableParams(queue="q", limit=1, owner="n", lease_ttl=30))
            async with storage._conn():  # type: ignore[attr-defined]  # the pool's only one
                beat = storage.job_heartbeat_many(
                    JobHeartbeatManyParams([JobLease(job.id, job.lease_token or 0)], 30))
                result = await asyncio.wait_for(beat, timeout=5)
            assert result.held == {job.id}
        finally:
            await storage.close()

    asyncio.run(main())
