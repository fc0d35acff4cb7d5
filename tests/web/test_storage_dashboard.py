"""The dashboard's storage methods, on both backends: search, bounded counts, failure
groups, bulk actions by filter, health and metric rollups."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import TypeVar

from conveyor import Conveyor, JobState
from conveyor._storage import (
    JobAck,
    JobAckManyParams,
    JobBulkParams,
    JobCountCappedParams,
    JobFailureGroupsParams,
    JobFetchAvailableParams,
    JobFilter,
    JobInsert,
    JobSearchParams,
    MetricRow,
    MetricsSeriesParams,
    Storage,
)

T = TypeVar("T")


def run(app: Conveyor, body: Callable[[Storage], Awaitable[T]]) -> T:
    async def main() -> T:
        try:
            return await body(await app.storage())
        finally:
            await app.close_async()

    return asyncio.run(main())


def ins(task: str = "t", queue: str = "default", args: object = (1,),
        tags: tuple[str, ...] = (), kwargs: dict[str, object] | None = None) -> JobInsert:
    return JobInsert(task=task, queue=queue, args_json=json.dumps(list(args)),  # type: ignore[call-overload]
                     kwargs_json=json.dumps(kwargs or {}), priority=0, max_attempts=2,
                     tags_json=json.dumps(list(tags)), meta_json="{}")


async def fail(storage: Storage, queue: str, n: int, error: str, final: bool) -> list[int]:
    """Claim ``n`` jobs of ``queue`` and fail them with ``error`` (retryable or discarded)."""
    jobs = await storage.job_fetch_available(JobFetchAvailableParams(queue, n, "node-x", 30.0))
    state = JobState.DISCARDED if final else JobState.RETRYABLE
    acks = [JobAck(j.id, j.lease_token or 0, state, delay=3600.0,
                   error_json=json.dumps({"error": error, "attempt": j.attempt}))
            for j in jobs]
    await storage.job_ack_many(JobAckManyParams(acks))
    return [j.id for j in jobs]


def test_search_filters_and_pages_both_ways(app: Conveyor) -> None:
    async def body(s: Storage) -> None:
        await s.job_insert_many([ins("a", args=[i], tags=("red",) if i % 2 else ()) for i in range(10)]
            + [ins("b", queue="mail", kwargs={"to": "Ada@Example.com"})])
        everything = await s.job_search(JobSearchParams(limit=100))
        assert [j.id for j in everything] == list(range(11, 0, -1))
        page = await s.job_search(JobSearchParams(JobFilter(task="a"), limit=4, before_id=9))
        assert [j.id for j in page] == [8, 7, 6, 5]
        newer = await s.job_search(JobSearchParams(JobFilter(task="a"), limit=3, after_id=5))
        assert [j.id for j in newer] == [8, 7, 6]
        red = await s.job_search(JobSearchParams(JobFilter(tag="red")))
        assert [j.id for j in red] == [10, 8, 6, 4, 2]
        text = await s.job_search(JobSearchParams(JobFilter(text="ada@example")))
        assert [j.task for j in text] == ["b"]
        by_queue = await s.job_search(JobSearchParams(JobFilter(queue="mail",
                                                                 states=(JobState.AVAILABLE,))))
        assert [j.id for j in by_queue] == [11]
        none = await s.job_search(JobSearchParams(JobFilter(states=(JobState.RUNNING,))))
        assert none == []
        assert [j.id for j in await s.job_search(JobSearchParams(JobFilter(ids=(3, 5))))] == [5, 3]
        newest = await s.job_search(JobSearchParams(JobFilter(task="a", min_id=8)))
        assert [j.id for j in newest] == [10, 9, 8]
        assert await s.job_count_capped(JobCountCappedParams(JobFilter(task="a"), cap=4)) == 4
        assert await s.job_count_capped(JobCountCappedParams(JobFilter(task="a"), cap=99)) == 10

    run(app, body)


def test_counts_by_queue_are_exact_for_waiting_and_capped_for_final(app: Conveyor) -> None:
    async def body(s: Storage) -> None:
        await s.job_insert_many([ins(queue="q1") for _ in range(5)]
                                                    + [ins(queue="q2")])
        await fail(s, "q1", 3, "boom", final=True)
        counts = await s.job_count_by_queue(final_cap=2)
        active = {(c.queue, c.state): c.n for c in counts if c.queue is not None}
        assert active == {("q1", JobState.AVAILABLE): 2, ("q2", JobState.AVAILABLE): 1}
        final = {c.state: (c.n, c.capped) for c in counts if c.queue is None}
        assert final == {JobState.COMPLETED: (0, False), JobState.CANCELLED: (0, False),
                         JobState.DISCARDED: (2, True)}

    run(app, body)


def test_failure_groups_and_bulk_actions_by_group_key(app: Conveyor) -> None:
    async def body(s: Storage) -> None:
        await s.job_insert_many([ins("a", queue="q") for _ in range(9)])
        boom = await fail(s, "q", 4, "ValueError: boom\nsecond line", final=True)
        slow = await fail(s, "q", 3, "Timeout " + "x" * 300, final=False)
        groups = await s.job_failure_groups(JobFailureGroupsParams())
        assert [(g.task, g.error, g.retryable, g.discarded) for g in groups] == [
            ("a", "ValueError: boom", 0, 4), ("a", ("Timeout " + "x" * 300)[:200], 3, 0)]
        assert groups[0].last_id == max(boom) and groups[0].last_at is not None
        key = JobFilter(error_key=groups[1].error)
        assert await s.job_count_capped(JobCountCappedParams(key)) == 3
        retried = await s.job_retry_matching(JobBulkParams(
            JobFilter(error_key="ValueError: boom"), limit=3))
        assert [(c.id, c.task, c.queue, c.previous) for c in retried] == [
            (i, "a", "q", JobState.DISCARDED) for i in boom[:3]]
        assert [c.id for c in await s.job_discard_matching(JobBulkParams(key))] == slow
        assert {j.state for j in await s.job_search(JobSearchParams(JobFilter(ids=tuple(slow))))} \
            == {JobState.DISCARDED}
        discarded = await s.job_search(JobSearchParams(JobFilter(ids=(slow[0],))))
        assert discarded[0].errors[-1]["error"] == "discarded by an operator"
        # A running job is never discarded by a bulk action; available ones are.
        running = await s.job_fetch_available(JobFetchAvailableParams("q", 1, "node-y", 30.0))
        rest = await s.job_discard_matching(JobBulkParams(JobFilter(queue="q"), limit=100))
        # The 3 retried above and the 2 never claimed, less the one now running.
        assert len(rest) == 4 and running[0].id not in [c.id for c in rest]
        assert await s.job_count_running_by_node() == {"node-y": 1}

    run(app, body)


def test_db_health_reports_the_schema_version(app: Conveyor) -> None:
    health = run(app, lambda s: s.db_health())
    assert health.ok and health.reachable and health.version == health.latest >= 3


def test_metrics_add_up_across_flushes_and_prune(app: Conveyor) -> None:
    async def body(s: Storage) -> None:
        rows = [MetricRow("q", "t", "completed", 2, bucket=600.0),
                MetricRow("q", "t", "completed", 2),
                MetricRow("q", "t", "runtime_sum", 0.25, bucket=600.0),
                MetricRow("q", "t", "completed", 1, bucket=660.0)]
        await s.metrics_add(rows)
        await s.metrics_add(rows[:2])
        series = {(p.bucket, p.metric): p.value
                  for p in await s.metrics_series(MetricsSeriesParams(since=0))}
        assert series == {(600.0, "completed"): 4, (600.0, "runtime_sum"): 0.25,
                          (660.0, "completed"): 1}
        assert [(t.metric, t.value) for t in await s.metrics_totals()] == [("completed", 4)]
        assert await s.metrics_series(MetricsSeriesParams(since=0, queue="other")) == []
        await s.job_insert_many([ins(queue="q"), ins(queue="q")])
        await s.metrics_depth_sample(600.0)
        await s.metrics_depth_sample(600.0)  # replaces, no error
        depth = {(d.queue, d.state): d.n
                 for d in await s.metrics_depth_series(MetricsSeriesParams(since=0))}
        assert depth[("q", "available")] == 2 and depth[("*", "available")] == 2
        assert depth[("*", "running")] == 0
        assert await s.metrics_prune(660.0) > 0
        left = await s.metrics_series(MetricsSeriesParams(since=0))
        assert [(p.bucket, p.metric) for p in left] == [(660.0, "completed")]
        assert await s.metrics_depth_series(MetricsSeriesParams(since=0)) == []
        assert [(t.metric, t.value) for t in await s.metrics_totals()] == [("completed", 4)]

    run(app, body)
