"""Inline mode: each job runs when it is enqueued, through the worker's own executor
and outcome writes (events fire), with the real outcome of each way a handler ends."""

from __future__ import annotations

import asyncio

import pytest

from conveyor import Cancel, Conveyor, Discard, JobState, Snooze, StateChange, current_job


def register(app: Conveyor) -> None:
    @app.task
    def add(a: int, b: int) -> int:
        return a + b

    @app.task
    async def add_async(a: int, b: int) -> int:
        await asyncio.sleep(0)
        return a + b

    @app.task(max_attempts=3, backoff=600)
    def boom() -> None:
        raise ValueError("bad input")

    @app.task(max_attempts=1)
    async def boom_once() -> None:
        raise RuntimeError("no retry left")

    @app.task
    def sleepy() -> None:
        raise Snooze(300)

    @app.task
    async def cancels() -> None:
        raise Cancel("not wanted")

    @app.task
    def discards() -> None:
        raise Discard("poison")

    @app.task(max_attempts=5, backoff=600)
    def flaky() -> str:
        if current_job().attempt < 3:
            raise ConnectionError(f"try {current_job().attempt}")
        return "ok"


def test_each_way_a_handler_ends_is_stored_as_on_a_worker(conveyor_app: Conveyor) -> None:
    app = conveyor_app
    register(app)
    changes: list[StateChange] = []
    app.on_state_change(changes.append)
    t = app.tasks
    with app.inline():
        done = t["add"].enqueue(1, 2)
        done_async = t["add_async"].enqueue(3, 4)
        failed = t["boom"].enqueue()
        exhausted = t["boom_once"].enqueue()
        snoozed = t["sleepy"].enqueue()
        cancelled = t["cancels"].enqueue()
        discarded = t["discards"].enqueue()
    assert (done.state, done.result, done.attempt) == (JobState.COMPLETED, 3, 1)
    assert (done_async.state, done_async.result) == (JobState.COMPLETED, 7)
    assert failed.state is JobState.RETRYABLE and failed.attempt == 1
    assert "ValueError: bad input" in failed.errors[0]["error"]
    assert exhausted.state is JobState.DISCARDED
    assert snoozed.state is JobState.SCHEDULED and snoozed.attempt == 0  # attempt given back
    assert cancelled.state is JobState.CANCELLED
    assert discarded.state is JobState.DISCARDED and "poison" in discarded.errors[0]["error"]
    # stored: the public reads see the same
    stored = app.get_job(done.id)
    assert stored is not None and stored.state is JobState.COMPLETED and stored.result == 3
    # the production events, from the worker's path
    mine = [(c.state, c.source) for c in changes if c.job_id == done.id]
    assert mine == [(JobState.AVAILABLE, "enqueue"), (JobState.RUNNING, "worker"),
                    (JobState.COMPLETED, "worker")]
    # outside the block nothing runs
    later = t["add"].enqueue(5, 6)
    assert later.state is JobState.AVAILABLE


def test_retries_run_at_once_when_asked(conveyor_app: Conveyor) -> None:
    app = conveyor_app
    register(app)
    with app.inline(retries=True):
        flaky = app.tasks["flaky"].enqueue()
        boom = app.tasks["boom"].enqueue()
    assert (flaky.state, flaky.attempt, flaky.result) == (JobState.COMPLETED, 3, "ok")
    assert [e["error"] for e in flaky.errors] == ["ConnectionError: try 1",
                                                  "ConnectionError: try 2"]
    assert (boom.state, boom.attempt, len(boom.errors)) == (JobState.DISCARDED, 3, 3)


def test_delayed_jobs_wait_unless_included(conveyor_app: Conveyor) -> None:
    app = conveyor_app
    register(app)
    with app.inline():
        waiting = app.tasks["add"].options(delay=3600).enqueue(1, 1)
    assert waiting.state is JobState.SCHEDULED
    with app.inline(include_scheduled=True):
        ran = app.tasks["add"].options(delay=3600).enqueue(2, 2)
    assert (ran.state, ran.result) == (JobState.COMPLETED, 4)


def test_inline_in_async_code_and_nested_enqueues(conveyor_app: Conveyor) -> None:
    app = conveyor_app
    register(app)
    seen: list[int] = []

    @app.task
    async def parent(n: int) -> int:
        child = await app.tasks["add_async"].enqueue_async(n, n)
        seen.append(child.result)
        return n

    async def main() -> None:
        async with app.inline():
            job = await parent.enqueue_async(5)
            assert (job.state, job.result) == (JobState.COMPLETED, 5)
        assert (await parent.enqueue_async(1)).state is JobState.AVAILABLE
        await app.close_async()

    asyncio.run(main())
    assert seen == [10]  # the child ran inline too, inside its parent


def test_bad_options_are_refused(conveyor_app: Conveyor) -> None:
    with pytest.raises(TypeError):
        conveyor_app.inline(retries="yes")  # type: ignore[arg-type]
