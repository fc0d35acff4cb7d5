"""The virtual clock: delays, snoozes, retry backoff, cron ticks, rate limits and
unique periods follow ``clock.advance()``, on both backends, with no sleeping; and
an app without a clock runs the statements exactly as the SQL files have them."""

from __future__ import annotations

import asyncio

import pytest

from conveyor import Conveyor, JobState, Snooze, Unique, WorkerConfig
from conveyor._storage import create_storage, load_queries
from conveyor._storage.wake import WakeHub
from conveyor.testing import VirtualClock


def test_a_delayed_job_is_due_after_advance(conveyor_app: Conveyor,
                                            conveyor_clock: VirtualClock) -> None:
    app = conveyor_app

    @app.task
    def remind(who: str) -> str:
        return f"hi {who}"

    job = remind.options(delay=3600).enqueue("ada")
    assert len(app.drain()) == 0
    conveyor_clock.advance(minutes=50)
    assert len(app.drain()) == 0
    assert app.get_job(job.id).state is JobState.SCHEDULED  # type: ignore[union-attr]
    conveyor_clock.advance(minutes=11)
    assert [o.result for o in app.drain().completed] == ["hi ada"]


def test_a_snoozed_job_and_a_retry_backoff_follow_the_clock(
        conveyor_app: Conveyor, conveyor_clock: VirtualClock) -> None:
    app = conveyor_app
    calls = {"sleepy": 0, "flaky": 0}

    @app.task
    def sleepy() -> str:
        calls["sleepy"] += 1
        if calls["sleepy"] == 1:
            raise Snooze(600)
        return "awake"

    @app.task(backoff=900, max_attempts=3)
    def flaky() -> str:
        calls["flaky"] += 1
        if calls["flaky"] == 1:
            raise ConnectionError("down")
        return "up"

    sleepy.enqueue()
    flaky.enqueue()
    first = app.drain()
    assert [o.task for o in first.snoozed] == ["sleepy"]
    assert [o.task for o in first.retried] == ["flaky"]
    conveyor_clock.advance(seconds=500)
    assert len(app.drain()) == 0  # neither is due yet
    conveyor_clock.advance(seconds=200)  # 700 s: the snooze (600 s) is over, the backoff not
    assert [(o.task, o.result) for o in app.drain()] == [("sleepy", "awake")]
    conveyor_clock.advance(seconds=300)  # 1000 s: past the 900 s backoff
    retried = app.drain()
    assert [(o.task, o.result, o.attempt) for o in retried] == [("flaky", "up", 2)]


def test_a_cron_tick_comes_with_the_clock(conveyor_app: Conveyor,
                                          conveyor_clock: VirtualClock) -> None:
    app = conveyor_app
    ran: list[str] = []

    @app.periodic(cron="0 * * * *")
    def hourly() -> None:
        ran.append("tick")

    assert len(app.drain()) == 0  # declares the schedule; no tick since its creation
    conveyor_clock.advance(hours=1)
    assert [o.task for o in app.drain().completed] == ["hourly"]
    assert len(app.drain()) == 0  # the same tick is not run twice
    conveyor_clock.advance(hours=1)
    assert len(app.drain().completed) == 1
    assert ran == ["tick", "tick"]
    (info,) = app.list_schedules()
    assert info.next_run is not None and info.next_run > conveyor_clock.now()


def test_a_rate_limit_refills_with_the_clock(conveyor_app: Conveyor,
                                             conveyor_clock: VirtualClock) -> None:
    app = conveyor_app

    @app.task(rate_limit="1/h")
    def report(n: int) -> int:
        return n

    for n in (1, 2, 3):
        report.enqueue(n)
    first = app.drain()
    assert [o.result for o in first.completed] == [1]
    assert [j.args for j in first.held] == [[2], [3]]  # over the limit: back to wait
    assert len(app.drain()) == 0
    conveyor_clock.advance(minutes=30)
    assert len(app.drain()) == 0
    conveyor_clock.advance(minutes=31)
    second = [o.result for o in app.drain().completed]  # one an hour (either one: both
    assert len(second) == 1                                # waited about an hour)
    conveyor_clock.advance(hours=1)
    third = [o.result for o in app.drain().completed]
    assert sorted(second + third) == [2, 3]


def test_a_unique_period_is_measured_on_the_clock(conveyor_app: Conveyor,
                                                  conveyor_clock: VirtualClock) -> None:
    app = conveyor_app

    @app.task(unique=Unique(period=3600))
    def sync_account() -> None: ...

    conveyor_clock.advance(seconds=3600 - conveyor_clock.time() % 3600 + 1)  # a bucket's start
    first = sync_account.enqueue()
    assert sync_account.enqueue().id == first.id
    conveyor_clock.advance(hours=1)
    assert sync_account.enqueue().id != first.id


def test_virtual_time_is_shared_through_the_database(conveyor_app: Conveyor,
                                                     conveyor_clock: VirtualClock) -> None:
    app = conveyor_app

    @app.task
    def later() -> None: ...

    job = later.options(delay=7200).enqueue()
    conveyor_clock.advance(hours=3)
    other_clock = VirtualClock()
    other = Conveyor(app.url, clock=other_clock)  # another app: its own connections
    try:
        other.task(name="later")(lambda: None)
        assert [o.id for o in other.drain()] == [job.id]
        assert other_clock.offset >= 3 * 3600  # adopted from the database
    finally:
        other.close()

    async def main() -> None:  # the async twin, on another loop's connections
        await conveyor_clock.advance_async(minutes=5)
        assert (await app.storage()).virtual_clock
        await app.close_async()

    asyncio.run(main())
    assert conveyor_clock.offset == pytest.approx(3 * 3600 + 300)


def test_without_a_clock_the_statements_are_the_files_own(conveyor_app: Conveyor) -> None:
    """The production path: no clock, no rewriting, not one byte."""
    for dialect, url in (("sqlite", "sqlite:///x.db"), ("postgres", "postgresql://u@h/d")):
        plain = create_storage(url, WakeHub())
        assert plain._q == load_queries(dialect)  # type: ignore[attr-defined]
        virtual = create_storage(url, WakeHub(), virtual_clock=True)
        rewritten = virtual._q  # type: ignore[attr-defined]
        assert rewritten["clock_now"] != plain._q["clock_now"]  # type: ignore[attr-defined]
        assert all("conveyor_test_clock" in rewritten[n]
                   for n in ("job_fetch_available", "job_ack", "job_stage_due", "job_insert"))

    @conveyor_app.task
    def noop() -> None: ...

    noop.enqueue()
    conveyor_app.drain()

    async def opened() -> dict[str, str]:
        storage = await conveyor_app.storage()
        queries: dict[str, str] = storage.inner._q  # type: ignore[attr-defined]
        await conveyor_app.close_async()
        return {n: q for n, q in queries.items() if n in load_queries(conveyor_app.dialect)}

    assert asyncio.run(opened()) == load_queries(conveyor_app.dialect)


def test_bad_steps_are_refused() -> None:
    clock = VirtualClock()
    with pytest.raises(ValueError):
        clock.advance(-1)
    with pytest.raises(ValueError):
        clock.advance(hours=float("nan"))
    with pytest.raises(TypeError):
        clock.advance("1h")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Conveyor("sqlite:///x.db", clock=object())  # type: ignore[arg-type]
    assert clock.offset == 0


def test_a_real_worker_on_the_clock_runs_what_the_clock_made_due(
        conveyor_app: Conveyor, conveyor_clock: VirtualClock) -> None:
    app = conveyor_app

    @app.task
    def later() -> str:
        return "done"

    job = later.options(delay=3600).enqueue()

    async def burst() -> None:
        try:
            await app.run_worker({"default": 2}, config=WorkerConfig(burst=True))
        finally:
            await app.close_async()

    asyncio.run(burst())
    assert app.get_job(job.id).state is JobState.SCHEDULED  # type: ignore[union-attr]
    conveyor_clock.advance(hours=1, seconds=1)
    asyncio.run(burst())  # a worker's own stager, claims and acks, on virtual time
    done = app.get_job(job.id)
    assert done is not None and (done.state, done.result) == (JobState.COMPLETED, "done")
