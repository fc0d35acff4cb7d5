"""Middleware around execution, the state-change hook, and the metric rollups a worker
writes, on both backends."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Any

from conveyor import Conveyor, JobContext, JobState, StateChange, WorkerConfig, current_job
from conveyor._metric_schema import BOUNDS, bucket_index, minute_of
from conveyor._runtime.metrics import outcome_of
from conveyor._storage import JobAck, MetricsSeriesParams

from .._runtime_util import FAST, all_final, run_worker_until

TRACE: contextvars.ContextVar[str] = contextvars.ContextVar("trace", default="")


def drain(app: Conveyor, config: WorkerConfig = FAST) -> None:
    """Run a worker until every job is final, then close that loop's connections."""
    async def main() -> None:
        try:
            await run_worker_until(app, all_final(app), config=config)
        finally:
            await app.close_async()

    asyncio.run(main())


def test_middleware_wraps_every_execution_outermost_first(app: Conveyor) -> None:
    calls: list[str] = []
    seen: dict[str, str] = {}

    @app.add_middleware
    async def outer(job: JobContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
        calls.append(f"outer>{job.task}")
        token = TRACE.set(f"trace-{job.id}")
        try:
            return await call_next()
        finally:
            TRACE.reset(token)
            calls.append("outer<")

    @app.add_middleware
    async def inner(job: JobContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
        calls.append("inner>")
        try:
            return {"wrapped": await call_next()}
        except ValueError:
            calls.append("inner saw ValueError")
            raise

    @app.task
    def sync_add(a: int, b: int) -> int:  # runs in a thread: sees the middleware's context
        seen["sync"] = TRACE.get()
        return a + b

    @app.task(max_attempts=1)
    async def broken() -> None:
        seen["async"] = TRACE.get() + f"/{current_job().attempt}"
        raise ValueError("no")

    ok, bad = sync_add.enqueue(1, 2), broken.enqueue()
    drain(app)
    assert app.get_job(ok.id).result == {"wrapped": 3}  # type: ignore[union-attr]
    assert app.get_job(bad.id).state == JobState.DISCARDED  # type: ignore[union-attr]
    assert seen == {"sync": f"trace-{ok.id}", "async": f"trace-{bad.id}/1"}
    assert calls.count("outer<") == 2 and "inner saw ValueError" in calls
    assert calls.index("outer>sync_add") < calls.index("inner>")


def test_state_changes_follow_every_persisted_transition(app: Conveyor) -> None:
    changes: list[StateChange] = []
    app.on_state_change(changes.append)

    @app.on_state_change
    def broken_listener(change: StateChange) -> None:
        raise RuntimeError("a failing listener is logged, never raised")

    @app.task(max_attempts=1)
    def flaky(fail: bool) -> str:
        if fail:
            raise ValueError("bad input\nmore")
        return "ok"

    good, bad = flaky.enqueue(False), flaky.enqueue(True)
    drain(app)
    app.retry_job(bad.id)
    waiting = flaky.options(delay=3600).enqueue(False)
    app.cancel_job(waiting.id)

    def trail(job_id: int) -> list[tuple[str | None, str, str]]:
        return [(c.previous and c.previous.value, c.state.value, c.source)
                for c in changes if c.job_id == job_id]

    assert trail(good.id) == [(None, "available", "enqueue"), ("available", "running", "worker"),
                              ("running", "completed", "worker")]
    assert trail(bad.id) == [(None, "available", "enqueue"), ("available", "running", "worker"),
                             ("running", "discarded", "worker"), ("discarded", "available", "api")]
    assert trail(waiting.id) == [(None, "scheduled", "enqueue"), ("scheduled", "cancelled", "api")]
    failed = next(c for c in changes if c.job_id == bad.id and c.state == JobState.DISCARDED)
    assert failed.error == "ValueError: bad input\nmore" and failed.node
    assert failed.run_time is not None and failed.run_time >= 0
    assert (failed.task, failed.queue, failed.attempt) == ("flaky", "default", 1)


def test_outcomes_and_buckets() -> None:
    def ack(state: JobState, delta: int = 0) -> JobAck:
        return JobAck(1, 1, state, attempt_delta=delta)

    assert [outcome_of(ack(s)) for s in (JobState.COMPLETED, JobState.RETRYABLE,
                                         JobState.DISCARDED, JobState.CANCELLED)] == [
        "completed", "retried", "discarded", "cancelled"]
    assert outcome_of(ack(JobState.SCHEDULED, -1)) == "snoozed"
    assert outcome_of(ack(JobState.AVAILABLE)) == "retried"  # a retry with no backoff
    assert bucket_index(0.0) == 0 and bucket_index(BOUNDS[0]) == 0
    assert bucket_index(0.006) == 1 and bucket_index(1e9) == len(BOUNDS)
    assert minute_of(125.5) == 120.0


def test_worker_writes_rollups_totals_and_depth(app: Conveyor) -> None:
    @app.task(queue="mail", max_attempts=1)
    def send(fail: bool) -> None:
        if fail:
            raise ValueError("smtp down")

    app.enqueue_many([send.job(False) for _ in range(5)] + [send.job(True) for _ in range(2)])
    started = time.time()
    config = dataclasses.replace(FAST, queues={"mail": 5})

    async def body() -> None:
        await run_worker_until(app, all_final(app), config=config)
        storage = await app.storage()
        series = await storage.metrics_series(MetricsSeriesParams(since=minute_of(started)))
        sums: dict[str, float] = {}
        for point in series:
            assert point.queue == "mail"
            sums[point.metric] = sums.get(point.metric, 0.0) + point.value
        assert sums["completed"] == 5 and sums["discarded"] == 2
        assert sums["runtime_count"] == 7 and sums["latency_count"] == 7
        assert sum(v for k, v in sums.items() if k.startswith("runtime_b")) == 7
        totals = {(t.task, t.metric): t.value for t in await storage.metrics_totals()}
        assert totals[("send", "completed")] == 5 and totals[("send", "discarded")] == 2
        depth = await storage.metrics_depth_series(MetricsSeriesParams(since=minute_of(started)))
        assert any(d.queue == "*" for d in depth), "the leader samples depth at start"
        await app.close_async()

    asyncio.run(body())


def test_metrics_off_writes_nothing(app: Conveyor) -> None:
    @app.task
    def noop() -> None: ...

    noop.enqueue()
    config = dataclasses.replace(FAST, metrics_retention=0.0)

    async def body() -> None:
        await run_worker_until(app, all_final(app), config=config)
        storage = await app.storage()
        assert await storage.metrics_totals() == []
        await app.close_async()

    asyncio.run(body())


def test_handler_log_lines_carry_job_fields_in_json(app: Conveyor) -> None:
    import io
    import json
    import logging

    from conveyor._logfields import JobFields
    from conveyor.cli._logging import JsonFormatter

    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(JobFields())
    logger = logging.getLogger("tests.handler_logs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)

    @app.task(queue="default")
    def sync_logs() -> None:
        logger.info("from a sync handler")

    @app.task(queue="default")
    async def async_logs() -> None:
        logger.info("from an async handler")

    try:
        jobs = [sync_logs.enqueue(), async_logs.enqueue()]
        drain(app)
        logger.info("outside any job")
    finally:
        logger.removeHandler(handler)
    lines = [json.loads(line) for line in buffer.getvalue().splitlines()]
    by_message = {line["message"]: line for line in lines}
    for job, message in zip(jobs, ("from a sync handler", "from an async handler"), strict=True):
        line = by_message[message]
        assert (line["job_id"], line["task"], line["queue"], line["attempt"]) == (
            job.id, job.task, "default", 1)
    assert "job_id" not in by_message["outside any job"]
