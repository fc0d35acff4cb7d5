"""The testing toolkit follows the rules a worker follows (issue 28 defect 9): a test saw a
retry after 17.6 s from ``app.drain()`` where a worker waits the queue's 600 s.

Each rule a worker applies when it claims, finishes, retries or holds back a job is run
here through ``drain`` (and inline mode where the rule applies to it) and through a real
in-process ``Worker`` on the same database, and both must agree:

* a queue's default backoff (``set_queue_backoff``) times retries, a task's own backoff
  wins over it;
* ``Throttle`` (node scope, the default) holds the queue: its other jobs wait, other queues run;
* ``Throttle(scope="queue")`` writes a cool-down every worker respects, until it ends
  (the virtual clock ends it for the toolkit);
* a cool-down written by another worker holds the queue here too;
* a paused queue runs nothing, inline included;
* a task's concurrency limit counts jobs running on a worker (rate limits:
  tests/testing/test_clock.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Awaitable, Callable
from datetime import datetime

from conveyor import Conveyor, JobState, Throttle
from conveyor._job import Job
from conveyor._storage import QueueCooldownRaiseParams
from conveyor.testing import VirtualClock

from ._runtime_util import FAST, in_state, run_then_close, run_worker_until

Check = Callable[[], Awaitable[bool]]
BACKOFF = 600.0


async def _by_worker(app: Conveyor, queues: dict[str, int], done: Check) -> None:
    config = dataclasses.replace(FAST, queues=queues, settings_interval=0.05)
    await run_worker_until(app, done, config=config, timeout=30)


async def _delay(app: Conveyor, job: Job) -> float:
    """Seconds from now (database clock) until the job is due again."""
    current = await app.get_job_async(job.id)
    assert current is not None and current.scheduled_at is not None, current
    now: datetime = await (await app.storage()).clock_now()
    return (current.scheduled_at - now).total_seconds()


async def _state(app: Conveyor, job: Job) -> JobState:
    current = await app.get_job_async(job.id)
    assert current is not None
    return current.state


# -- retries: per-queue and per-task backoff ---------------------------------------------------


def test_a_queues_backoff_times_retries_as_on_a_worker(app: Conveyor) -> None:
    @app.task(max_attempts=3)
    def fails() -> None:
        raise RuntimeError("upstream down")

    async def main() -> None:
        for queue in ("drained", "inline", "worked"):
            await app.set_queue_backoff_async(queue, BACKOFF)
        drained = await fails.options(queue="drained").enqueue_async()
        assert len((await app.drain_async(queues=["drained"])).retried) == 1
        async with app.inline():
            inline = await fails.options(queue="inline").enqueue_async()
        assert inline.state is JobState.RETRYABLE
        worked = await fails.options(queue="worked").enqueue_async()
        await _by_worker(app, {"worked": 1}, in_state(app, worked, JobState.RETRYABLE))
        delays = {name: await _delay(app, job) for name, job in
                  (("drain", drained), ("inline", inline), ("worker", worked))}
        assert all(BACKOFF - 60 < d <= BACKOFF for d in delays.values()), delays

    run_then_close(app, main)


def test_a_tasks_backoff_wins_over_its_queues_as_on_a_worker(app: Conveyor) -> None:
    @app.task(max_attempts=3, backoff=5)
    def fails() -> None:
        raise RuntimeError("upstream down")

    async def main() -> None:
        for queue in ("drained", "worked"):
            await app.set_queue_backoff_async(queue, BACKOFF)
        drained = await fails.options(queue="drained").enqueue_async()
        await app.drain_async(queues=["drained"])
        worked = await fails.options(queue="worked").enqueue_async()
        await _by_worker(app, {"worked": 1}, in_state(app, worked, JobState.RETRYABLE))
        delays = [await _delay(app, drained), await _delay(app, worked)]
        assert all(0 < d <= 5 for d in delays), delays

    run_then_close(app, main)


# -- Throttle: node scope holds the queue, queue scope cools it on every worker ------------


def _throttle_holds_its_queue(app: Conveyor, scope: str) -> None:
    @app.task(name=f"throttled_{scope}")
    def throttled(n: int) -> int:
        if n == 0:
            raise Throttle(retry_after=BACKOFF, scope=scope)
        return n

    @app.task
    def elsewhere() -> str:
        return "ran"

    async def main() -> None:
        first = await throttled.options(queue="drained").enqueue_async(0)
        second = await throttled.options(queue="drained").enqueue_async(1)
        other = await elsewhere.options(queue="drained-other").enqueue_async()
        result = await app.drain_async(queues=["drained", "drained-other"])
        assert [o.id for o in result.snoozed] == [first.id], result
        assert [o.id for o in result.completed] == [other.id], result
        assert await _state(app, second) is JobState.AVAILABLE  # held, as on a worker
        assert len(await app.drain_async(queues=["drained"])) == 0  # still held
        async with app.inline():  # inline mode respects the hold too
            inline = await throttled.options(queue="drained").enqueue_async(2)
        assert inline.state is JobState.AVAILABLE

        # A worker: the same jobs on another queue, one slot, a marker on a second queue.
        w_first = await throttled.options(queue="worked").enqueue_async(0)
        w_second = await throttled.options(queue="worked").enqueue_async(1)

        async def marker_after_throttle() -> bool:
            return await _state(app, w_first) is JobState.SCHEDULED

        async def then_marker(worker: object) -> None:
            await wait(marker_after_throttle)
            marker = await elsewhere.options(queue="worked-other").enqueue_async()
            await wait(in_state(app, marker, JobState.COMPLETED))

        config = dataclasses.replace(FAST, queues={"worked": 1, "worked-other": 1})
        await run_worker_until(app, lambda: _true(), config=config, during=then_marker)
        assert await _state(app, w_second) is JobState.AVAILABLE

    run_then_close(app, main)


async def _true() -> bool:
    return True


async def wait(check: Check, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def test_a_node_throttle_holds_its_queue_as_on_a_worker(app: Conveyor) -> None:
    _throttle_holds_its_queue(app, "node")


def test_a_queue_throttle_holds_its_queue_as_on_a_worker(app: Conveyor) -> None:
    _throttle_holds_its_queue(app, "queue")

    async def cooling() -> set[str]:
        other = Conveyor(app.url)
        try:
            rows = await (await other.storage()).queue_cooldown_list()
            return {r.queue for r in rows if r.active}
        finally:
            await other.close_async()

    assert asyncio.run(cooling()) == {"drained", "worked"}  # written for every worker


def test_a_queue_cool_down_ends_with_the_virtual_clock(db_url: str) -> None:
    clock = VirtualClock()
    app = Conveyor(db_url, clock=clock)

    @app.task
    def throttled(n: int) -> int:
        if n == 0:
            raise Throttle(retry_after=BACKOFF, scope="queue")
        return n

    async def main() -> None:
        await throttled.enqueue_async(0)
        second = await throttled.enqueue_async(1)
        assert len((await app.drain_async()).snoozed) == 1
        assert await _state(app, second) is JobState.AVAILABLE
        await clock.advance_async(BACKOFF / 2)
        assert len(await app.drain_async()) == 0  # still cooling down
        await clock.advance_async(BACKOFF / 2 + 1)
        ran = await app.drain_async()
        assert second.id in [o.id for o in ran.completed], ran

    run_then_close(app, main)


def test_a_cool_down_another_worker_wrote_holds_the_toolkit(app: Conveyor) -> None:
    @app.task
    def work() -> str:
        return "ran"

    async def main() -> None:
        storage = await app.storage()
        await storage.queue_cooldown_raise(QueueCooldownRaiseParams("mail", BACKOFF, BACKOFF))
        job = await work.options(queue="mail").enqueue_async()
        assert len(await app.drain_async()) == 0
        async with app.inline():
            inline = await work.options(queue="mail").enqueue_async()
        assert inline.state is JobState.AVAILABLE and await _state(app, job) is JobState.AVAILABLE
        ran = await app.drain_async(include_scheduled=True)  # skips waits, as for delays
        assert len(ran.completed) == 2, ran

    run_then_close(app, main)


# -- paused queues, concurrency ---------------------------------------------------------------


def test_a_paused_queue_runs_nothing_inline_as_on_a_worker(app: Conveyor) -> None:
    @app.task
    def work() -> str:
        return "ran"

    async def main() -> None:
        await app.pause_queue_async("paused")
        async with app.inline():
            inline = await work.options(queue="paused").enqueue_async()
        assert inline.state is JobState.AVAILABLE
        assert len(await app.drain_async()) == 0
        marker = await work.options(queue="open").enqueue_async()
        await _by_worker(app, {"paused": 1, "open": 1}, in_state(app, marker, JobState.COMPLETED))
        assert await _state(app, inline) is JobState.AVAILABLE
        await app.resume_queue_async("paused")
        async with app.inline():
            again = await work.options(queue="paused").enqueue_async()
        assert again.state is JobState.COMPLETED

    run_then_close(app, main)


def test_drain_counts_a_job_running_on_a_worker_against_the_concurrency_limit(
        app: Conveyor) -> None:
    release = threading.Event()

    @app.task(concurrency=1)
    def exclusive(n: int) -> int:
        if n == 0:
            release.wait(30)
        return n

    async def main() -> None:
        running = await exclusive.enqueue_async(0)
        waiting = await exclusive.enqueue_async(1)

        async def drain_while_it_runs(worker: object) -> None:
            await wait(in_state(app, running, JobState.RUNNING))
            result = await app.drain_async()
            assert [j.id for j in result.held] == [waiting.id], result
            release.set()

        config = dataclasses.replace(FAST, queues={"default": 1})
        await run_worker_until(app, in_state(app, running, JobState.COMPLETED), config=config,
                               during=drain_while_it_runs)

    try:
        run_then_close(app, main)
    finally:
        release.set()
