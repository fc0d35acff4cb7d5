"""Flow control through the public API and an in-process worker, on both backends."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable

import pytest

from conveyor import Conveyor, InvalidStateError, JobState, RateLimit, Throttle, Unique, current_job
from conveyor._runtime import Worker

from ._runtime_util import FAST, all_final, in_state, run_worker_until


class Overlap:
    """Counts how many handlers run at once (all in this process)."""

    def __init__(self) -> None:
        self.now = self.peak = 0
        self.starts: list[float] = []

    async def run(self, seconds: float) -> None:
        self.now += 1
        self.peak = max(self.peak, self.now)
        self.starts.append(time.monotonic())
        try:
            await asyncio.sleep(seconds)
        finally:
            self.now -= 1


def test_unique_enqueue_returns_the_live_job(app: Conveyor) -> None:
    @app.task(unique=Unique(key=lambda user_id: f"user-{user_id}"))
    async def sync_user(user_id: int) -> None: ...

    @app.task
    async def plain(x: int) -> None: ...

    first = sync_user.enqueue(7)
    again = sync_user.enqueue(7)
    other = sync_user.enqueue(8)
    assert not first.duplicate and again.duplicate and again.id == first.id
    assert not other.duplicate and other.id != first.id
    a = plain.options(unique_key="only-once").enqueue(1)
    b = plain.options(unique_key="only-once").enqueue(2)
    assert b.duplicate and b.id == a.id and b.args == [1]
    batch = app.enqueue_many([sync_user.job(9), sync_user.job(9), plain.job(3)])
    assert [j.duplicate for j in batch] == [False, True, False] and batch[0].id == batch[1].id
    assert sum(app.count_jobs().values()) == 5


def test_unique_key_is_free_again_after_the_job_finishes(app: Conveyor) -> None:
    @app.task(unique=Unique(states=("available", "scheduled")))
    async def refresh(page: str) -> None: ...

    async def main() -> None:
        job = await refresh.enqueue_async("home")
        assert (await refresh.enqueue_async("home")).duplicate
        await run_worker_until(app, in_state(app, job, JobState.COMPLETED))
        fresh = await refresh.enqueue_async("home")
        assert not fresh.duplicate and fresh.id != job.id
        await app.close_async()

    asyncio.run(main())


def test_unique_period_and_bad_declarations() -> None:
    with pytest.raises(ValueError):
        Unique(states=("sleeping",))
    with pytest.raises(ValueError):
        Unique(period=0)
    with pytest.raises(ValueError, match="invalid rate"):
        RateLimit("lots")
    with pytest.raises(ValueError):
        RateLimit("5/s", burst=0)
    assert RateLimit("100/m").interval == pytest.approx(0.6)
    assert RateLimit("5/2s").interval == pytest.approx(0.4)


def test_concurrency_limit_caps_running_jobs(app: Conveyor) -> None:
    capped, per_user = Overlap(), Overlap()
    users: dict[int, Overlap] = {1: Overlap(), 2: Overlap()}

    @app.task(concurrency=2)
    async def capped_job(i: int) -> None:
        await capped.run(0.05)

    @app.task(concurrency_key=lambda user, i: str(user))
    async def user_job(user: int, i: int) -> None:
        await users[user].run(0.03)
        await per_user.run(0)

    async def main() -> None:
        await app.enqueue_many_async([capped_job.job(i) for i in range(10)])
        await app.enqueue_many_async([user_job.job(u, i) for i in range(5) for u in (1, 2)])
        config = dataclasses.replace(FAST, queues={"default": 20})
        await run_worker_until(app, all_final(app), config=config)
        counts = await app.count_jobs_async()
        assert counts["completed"] == 20
        jobs = await app.list_jobs_async(limit=100)
        assert all(j.attempt == 1 for j in jobs)  # waiting for a slot costs no attempt
        await app.close_async()

    asyncio.run(main())
    assert capped.peak == 2
    assert users[1].peak == 1 and users[2].peak == 1 and per_user.peak >= 1


def test_rate_limit_spaces_starts_without_using_attempts(app: Conveyor) -> None:
    seen = Overlap()

    @app.task(rate_limit="10/s")
    async def limited(i: int) -> None:
        await seen.run(0)

    async def main() -> None:
        await app.enqueue_many_async([limited.job(i) for i in range(12)])
        config = dataclasses.replace(FAST, queues={"default": 20})
        await run_worker_until(app, all_final(app), config=config)
        assert all(j.attempt == 1 for j in await app.list_jobs_async())
        await app.close_async()

    asyncio.run(main())
    starts = sorted(seen.starts)
    assert len(starts) == 12
    for i, start in enumerate(starts):  # no one-second window holds more than 10 starts
        assert sum(1 for s in starts[i:] if s - start < 1.0) <= 10
    assert starts[-1] - starts[0] >= 1.0


def test_throttle_reschedules_without_an_attempt_and_backs_off(app: Conveyor) -> None:
    runs: list[float] = []

    @app.task(max_attempts=1)
    async def upstream() -> str:
        runs.append(time.monotonic())
        if len(runs) == 1:
            raise Throttle(retry_after=0.3)
        return "ok"

    async def main() -> None:
        job = await upstream.enqueue_async()
        await run_worker_until(app, in_state(app, job, JobState.COMPLETED))
        final = await app.get_job_async(job.id)
        assert final is not None and final.attempt == 1 and final.errors == []
        await app.close_async()

    asyncio.run(main())
    assert len(runs) == 2 and runs[1] - runs[0] >= 0.28


async def _until(check: Callable[[], Awaitable[bool]], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


def test_pause_resume_and_scale_reach_a_running_worker(app: Conveyor) -> None:
    seen = Overlap()

    @app.task(queue="work")
    async def step(i: int) -> None:
        await seen.run(0.05)

    @app.task(queue="other")
    async def marker() -> None:
        """Runs beside the paused queue: once it is done, the worker has fetched after
        the paused jobs were committed, and took none of them."""

    async def during(worker: Worker) -> None:
        await app.pause_queue_async("work")
        await _until(lambda: _paused(worker, "work"))
        jobs = await app.enqueue_many_async([step.job(i) for i in range(6)])
        mark = await marker.enqueue_async()
        await _until(in_state(app, mark, JobState.COMPLETED))
        assert seen.starts == []
        await app.set_queue_concurrency_async("work", 1)
        await app.resume_queue_async("work")
        await _until(in_state(app, jobs[-1], JobState.COMPLETED))

    async def main() -> None:
        config = dataclasses.replace(FAST, queues={"work": 5, "other": 1}, settings_interval=0.1)
        await run_worker_until(app, all_final(app), config=config, during=during)
        queues = {q.name: q for q in await app.list_queues_async()}
        assert queues["work"].concurrency == 1 and not queues["work"].paused
        await app.close_async()

    asyncio.run(main())
    assert len(seen.starts) == 6 and seen.peak == 1


async def _paused(worker: Worker, queue: str) -> bool:
    return worker.producers[queue].paused


def test_periodic_jobs_run_once_per_tick(app: Conveyor) -> None:
    ticks: list[str] = []

    @app.periodic(cron="* * * * * *", misfire="skip")
    async def every_second() -> None:
        ticks.append(current_job().job.meta["tick"])

    async def main() -> None:
        config = dataclasses.replace(FAST, cron_interval=0.2)
        worker = await run_worker_until(app, _at_least(app, 3), config=config)
        assert worker.leader.term >= 1
        schedules = await app.list_schedules_async()
        assert [s.row.name for s in schedules] == ["every_second"] and schedules[0].defined_in_code
        assert schedules[0].row.last_tick is not None and schedules[0].next_run is not None
        await app.close_async()

    asyncio.run(main())
    assert len(ticks) == len(set(ticks)) >= 3


def _at_least(app: Conveyor, n: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return (await app.count_jobs_async())["completed"] >= n

    return check


def test_runtime_schedules_can_be_paused_triggered_and_removed(app: Conveyor) -> None:
    @app.task
    async def cleanup(days: int) -> int:
        return days

    app.add_schedule("nightly-cleanup", cron="0 3 * * *", task=cleanup, args=[30],
                     timezone="Europe/Paris")
    (info,) = app.list_schedules()
    assert info.row.task == "cleanup" and info.row.args == [30] and not info.defined_in_code
    app.pause_schedule("nightly-cleanup")
    assert app.list_schedules()[0].row.paused and app.list_schedules()[0].next_run is None
    job = app.trigger_schedule("nightly-cleanup")
    assert job.task == "cleanup" and job.args == [30] and job.meta["schedule"] == "nightly-cleanup"
    app.resume_schedule("nightly-cleanup")
    app.remove_schedule("nightly-cleanup")
    assert app.list_schedules() == []
    with pytest.raises(LookupError):
        app.pause_schedule("nightly-cleanup")
    with pytest.raises(ValueError):
        app.add_schedule("bad", cron="99 * * * *", task=cleanup, args=[1])
    with pytest.raises(TypeError):
        app.add_schedule("unfit", cron="0 3 * * *", task=cleanup)  # missing argument
    with pytest.raises(ValueError):
        app.set_queue_concurrency("mail", 0)
    with pytest.raises(ValueError):
        app.pause_queue("bad queue")


def test_pruner_deletes_old_finished_jobs_in_batches(app: Conveyor) -> None:
    @app.task
    async def noop(i: int) -> None: ...

    async def main() -> None:
        await app.enqueue_many_async([noop.job(i) for i in range(25)])
        await run_worker_until(app, all_final(app))
        from conveyor._runtime.pruner import Pruner

        pruner = Pruner(await app.storage(), None, 60, completed_age=-1, discarded_age=-1, batch=10)
        assert await pruner.run_once() == 25
        assert sum((await app.count_jobs_async()).values()) == 0
        await app.close_async()

    asyncio.run(main())


def test_explain_names_every_reason(app: Conveyor) -> None:
    # 1/h and a long lease: on a loaded machine neither a minute's refill nor a starved
    # heartbeat (the lease expiring, first rescued) may let second start mid-check
    @app.task(rate_limit="1/h", concurrency=1, queue="limited")
    async def gated(i: int) -> None:
        await asyncio.sleep(30)

    @app.task(backoff=3600, max_attempts=3)
    async def fails() -> None:
        raise ValueError("upstream down")

    async def main() -> None:
        later = await fails.options(delay=600).enqueue_async()
        failing = await fails.enqueue_async()
        first, second, third = await app.enqueue_many_async([gated.job(i) for i in range(3)])

        async def during(worker: Worker) -> None:
            await _until(in_state(app, failing, JobState.RETRYABLE))
            await _until(in_state(app, first, JobState.RUNNING))
            # second and third were claimed with first, then held back by the limits:
            # their way back to scheduled is an outcome write that may still be pending.
            await _until(in_state(app, second, JobState.SCHEDULED))
            await _until(in_state(app, third, JobState.SCHEDULED))
            text = {j.id: await _reasons(app, j.id) for j in (later, failing, first, second)}
            assert "scheduled for" in text[later.id]
            assert "backoff after attempt 1 failed (ValueError: upstream down)" in text[failing.id]
            assert "it is running" in text[first.id]
            assert "concurrency limit 1" in text[second.id] and f"#{first.id}" in text[second.id]
            assert "rate limit 1/h" in text[second.id]
            await app.pause_queue_async("limited")
            assert "queue 'limited' is paused" in await _reasons(app, third.id)

        config = dataclasses.replace(FAST, queues={"default": 2, "limited": 5}, lease_ttl=120.0)
        await run_worker_until(app, _true, config=config, during=during)
        nobody = await _reasons(app, third.id)  # the worker has stopped
        assert "no live worker serves queue 'limited'" in nobody
        await app.close_async()

    asyncio.run(main())


def test_explain_says_when_a_job_is_next_or_behind(app: Conveyor) -> None:
    @app.task
    async def work(i: int) -> None: ...

    async def main() -> None:
        a, b = await app.enqueue_many_async([work.job(1), work.job(2)])
        config = dataclasses.replace(FAST, queues={"default": 1})
        worker = Worker(app.registry, await app.storage(), config)
        await worker.heartbeat.run_once()  # registered, but not fetching
        ahead = await app.explain_job_async(b.id)
        assert ahead.reasons == [] and "1 job(s) are ahead" in ahead.notes[0]
        first = await app.explain_job_async(a.id)
        assert "it is next" in first.notes[0]
        done = await run_worker_until(app, all_final(app), config=config)
        assert done.completed >= 2
        final = await app.explain_job_async(a.id)
        assert "it completed" in final.reasons[0]
        with pytest.raises(LookupError):
            await app.explain_job_async(10**9)
        await app.close_async()

    asyncio.run(main())


async def _reasons(app: Conveyor, job_id: int) -> str:
    return "\n".join((await app.explain_job_async(job_id)).reasons)


async def _true() -> bool:
    return True


def test_retrying_a_unique_job_whose_key_is_taken_says_so(app: Conveyor) -> None:
    @app.task(unique=Unique())
    async def once(x: int) -> None: ...

    first = once.enqueue(1)
    app.cancel_job(first.id)
    second = once.enqueue(1)  # the key is free again once the first is cancelled
    assert not second.duplicate
    with pytest.raises(InvalidStateError, match="another live job holds its unique key"):
        app.retry_job(first.id)
    app.cancel_job(second.id)
    assert app.retry_job(first.id).state == JobState.AVAILABLE
