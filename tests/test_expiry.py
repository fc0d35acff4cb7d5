"""Job expiry on both backends: ``task.options(expires_in=/expires_at=)`` and
``@app.task(expires_in=)``. A job not started by its time never runs: it ends cancelled
with the reason "expired" (errors, event, explain_job), whether the expirer finds it
waiting (a paused or idle queue) or a worker claims it late (admission). A running job
is not affected. Time is the database's, moved with the testing toolkit's clock."""

from __future__ import annotations

import asyncio
import dataclasses
import html
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from conveyor import Conveyor, Job, JobState, StateChange, WorkflowError
from conveyor._app import JobFilter
from conveyor._runtime.admission import Admission
from conveyor._runtime.expirer import Expirer, expired_error
from conveyor._storage import JobAckManyParams, JobFetchAvailableParams
from conveyor.testing import VirtualClock

from ._runtime_util import FAST, run_worker_until
from .conftest import wait_for_async


@pytest.fixture
def clocked(db_url: str) -> Iterator[tuple[Conveyor, VirtualClock]]:
    clock = VirtualClock()
    app = Conveyor(db_url, clock=clock)
    try:
        yield app, clock
    finally:
        app.close()


def _register(app: Conveyor, ran: list[Any]) -> Any:
    @app.task
    def ping(n: int) -> int:
        ran.append(n)
        return n

    @app.task(expires_in=30)
    def short_lived(n: int) -> int:
        ran.append(("short", n))
        return n

    return ping, short_lived


def _get(app: Conveyor, job_id: int) -> Job:
    job = app.get_job(job_id)
    assert job is not None
    return job


async def _aget(app: Conveyor, job_id: int) -> Job:
    job = await app.get_job_async(job_id)
    assert job is not None
    return job


def _is_expired(job: Job) -> bool:
    return (job.state is JobState.CANCELLED and bool(job.errors)
            and job.errors[-1].get("reason") == "expired")


# -- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, -0.5, float("nan"), float("inf"), 1e12])
def test_expires_in_out_of_range_is_refused(app: Conveyor, value: float) -> None:
    ping, _ = _register(app, [])
    with pytest.raises(ValueError, match="expires_in"):
        ping.options(expires_in=value)
    with pytest.raises(ValueError, match="expires_in"):
        app.task(name="other", expires_in=value)(lambda: None)


@pytest.mark.parametrize("value", ["60", True, [60], b"1"])
def test_expires_in_of_a_wrong_type_is_refused(app: Conveyor, value: Any) -> None:
    ping, _ = _register(app, [])
    with pytest.raises(TypeError, match="expires_in must be a number"):
        ping.options(expires_in=value)
    with pytest.raises(TypeError, match="expires_in must be a number"):
        app.task(name="other", expires_in=value)(lambda: None)


def test_expires_at_must_be_an_aware_datetime(app: Conveyor) -> None:
    ping, _ = _register(app, [])
    with pytest.raises(ValueError, match="timezone-aware"):
        ping.options(expires_at=datetime.now() + timedelta(minutes=1))
    with pytest.raises(TypeError, match="expires_at must be a timezone-aware datetime"):
        ping.options(expires_at="2030-01-01T00:00:00Z")
    with pytest.raises(TypeError, match="expires_at"):
        ping.options(expires_at=1_900_000_000)
    with pytest.raises(ValueError, match="within 100 years"):
        ping.options(expires_at=datetime(9999, 1, 1, tzinfo=UTC))
    with pytest.raises(ValueError, match="not both"):
        ping.options(expires_in=60, expires_at=datetime.now(UTC) + timedelta(minutes=1))


def test_an_expiry_before_the_job_is_due_is_refused(app: Conveyor) -> None:
    ping, short_lived = _register(app, [])
    with pytest.raises(ValueError, match="expire before it is due"):
        ping.options(delay=60, expires_in=30)
    with pytest.raises(ValueError, match="expire before it is due"):
        short_lived.options(delay=60)  # the task's own expires_in=30
    soon = datetime.now(UTC) + timedelta(minutes=1)
    with pytest.raises(ValueError, match="expire before it is due"):
        ping.options(run_at=soon + timedelta(minutes=1), expires_at=soon)
    assert app.count_jobs().get("available", 0) == 0  # nothing was written


def test_an_expiring_job_cannot_join_a_workflow(app: Conveyor) -> None:
    ping, _ = _register(app, [])
    first = ping.enqueue(1)
    with pytest.raises(WorkflowError, match="expiry"):
        ping.options(expires_in=60, depends_on=[first]).enqueue(2)


# -- what is stored ----------------------------------------------------------------------


def test_expires_at_is_stored_on_every_enqueue_path(app: Conveyor) -> None:
    ping, short_lived = _register(app, [])
    before = datetime.now(UTC)
    plain = ping.enqueue(1)
    relative = ping.options(expires_in=60).enqueue(2)
    moment = datetime.now(UTC) + timedelta(hours=2)
    absolute = ping.options(expires_at=moment).enqueue(3)
    default = short_lived.enqueue(4)
    batch = app.enqueue_many([ping.options(expires_in=60).job(i) for i in range(5, 8)]
                             + [ping.job(9), short_lived.job(10)])
    many = app.enqueue_many([ping.job(i) for i in range(20, 40)])  # the plain paths
    got = {j.id: _get(app, j.id) for j in [plain, relative, absolute, default, *batch, *many]}
    assert got[plain.id].expires_at is None
    assert all(got[j.id].expires_at is None for j in many)
    for job, seconds in [(relative, 60), (default, 30), (batch[0], 60), (batch[2], 60),
                         (batch[4], 30)]:
        stored = got[job.id].expires_at
        assert stored is not None
        assert abs((stored - before).total_seconds() - seconds) < 30, (job.id, stored, before)
    assert got[batch[3].id].expires_at is None
    stored_moment = got[absolute.id].expires_at
    assert stored_moment is not None and abs((stored_moment - moment).total_seconds()) < 0.01
    assert relative.expires_at is not None  # the enqueued Job says so too


def test_enqueue_async_stores_the_expiry(app: Conveyor) -> None:
    ping, _ = _register(app, [])

    async def main() -> Job:
        try:
            job: Job = await ping.options(expires_in=60).enqueue_async(1)
            return job
        finally:
            await app.close_async()

    job = asyncio.run(main())
    assert job.expires_at is not None


# -- the expirer ---------------------------------------------------------------------------


def _expire(app: Conveyor) -> list[int]:
    async def main() -> list[int]:
        try:
            storage = await app._observed()
            changed = await Expirer(storage.with_source("expirer"), None, 1.0).run_once()
            return [c.id for c in changed]
        finally:
            await app.close_async()

    return asyncio.run(main())


def test_a_job_in_a_paused_queue_expires(clocked: tuple[Conveyor, VirtualClock]) -> None:
    app, clock = clocked
    ran: list[Any] = []
    ping, _ = _register(app, ran)
    events: list[StateChange] = []
    app.on_state_change(events.append)
    app.pause_queue("default")
    job = ping.options(expires_in=60).enqueue(1)
    keep = ping.options(expires_in=600).enqueue(2)
    plain = ping.enqueue(3)
    assert _expire(app) == []  # not yet
    clock.advance(seconds=61)
    assert _expire(app) == [job.id]
    done = _get(app, job.id)
    assert _is_expired(done) and done.finished_at is not None and done.attempt == 0
    assert "expired" in done.errors[-1]["error"]
    assert _get(app, keep.id).state is JobState.AVAILABLE
    assert _get(app, plain.id).state is JobState.AVAILABLE
    expired = [e for e in events if e.job_id == job.id and e.state is JobState.CANCELLED]
    assert expired and expired[0].previous is JobState.AVAILABLE
    assert expired[0].source == "expirer"
    why = app.explain_job(job.id)
    assert "expired" in why.summary and "never run" in why.summary
    assert "expires at" in " ".join(app.explain_job(keep.id).notes)
    app.resume_queue("default")
    assert [o.id for o in app.drain().completed] == [keep.id, plain.id]
    assert ran == [2, 3]


def test_scheduled_and_retryable_jobs_expire_too(clocked: tuple[Conveyor, VirtualClock]) -> None:
    app, clock = clocked
    ping, _ = _register(app, [])
    scheduled = ping.options(delay=30, expires_in=60).enqueue(1)
    assert scheduled.state is JobState.SCHEDULED
    clock.advance(seconds=90)
    why = app.explain_job(scheduled.id)
    assert "expired at" in why.summary  # past its time, before the expirer's pass
    assert _expire(app) == [scheduled.id]
    assert _is_expired(_get(app, scheduled.id))


def test_drain_honours_expiry(clocked: tuple[Conveyor, VirtualClock]) -> None:
    app, clock = clocked
    ran: list[Any] = []
    ping, short_lived = _register(app, ran)
    late = short_lived.enqueue(1)
    in_time = ping.options(expires_in=600).enqueue(2)
    clock.advance(seconds=31)
    result = app.drain()
    assert [o.id for o in result.cancelled] == [late.id]
    assert result.cancelled[0].error is not None and "expired" in result.cancelled[0].error
    assert [o.id for o in result.completed] == [in_time.id]
    assert ran == [2]
    assert _is_expired(_get(app, late.id))


def test_drain_include_scheduled_does_not_run_an_expired_job(
        clocked: tuple[Conveyor, VirtualClock]) -> None:
    app, clock = clocked
    ran: list[Any] = []
    ping, _ = _register(app, ran)
    job = ping.options(delay=10, expires_in=20).enqueue(1)
    clock.advance(seconds=25)
    result = app.drain(include_scheduled=True)
    assert [o.id for o in result.cancelled] == [job.id] and ran == []


# -- admission: a job claimed past its expiry ---------------------------------------------------


class _Producer:
    """What admission reads of a producer: its queue and rate limit."""

    queue = "default"
    rate_limit = None


def test_a_job_claimed_past_its_expiry_is_cancelled_not_run(
        clocked: tuple[Conveyor, VirtualClock]) -> None:
    app, clock = clocked
    ran: list[Any] = []
    ping, _ = _register(app, ran)
    late = ping.options(expires_in=60).enqueue(1)
    fine = ping.options(expires_in=600).enqueue(2)
    plain = ping.enqueue(3)
    clock.advance(seconds=61)

    async def main() -> tuple[list[int], list[int]]:
        try:
            storage = (await app._observed()).with_source("worker")
            claimed = await storage.job_fetch_available(
                JobFetchAvailableParams("default", 10, "node-a", 30.0))
            acks: list[Any] = []
            admitted = await Admission(app.tasks, storage, acks.append).admit(
                claimed, _Producer())  # type: ignore[arg-type]
            applied = await storage.job_ack_many(JobAckManyParams(acks, "node-a"))
            return [j.id for j in admitted], applied
        finally:
            await app.close_async()

    admitted, applied = asyncio.run(main())
    assert sorted(admitted) == [fine.id, plain.id]
    assert applied == [late.id]
    done = _get(app, late.id)
    assert _is_expired(done) and done.attempt == 0 and ran == []


# -- a worker ----------------------------------------------------------------------------------


def test_a_worker_never_runs_an_expired_job_and_a_running_one_is_not_affected(
        db_url: str) -> None:
    clock = VirtualClock()
    app = Conveyor(db_url, clock=clock)
    ran: list[Any] = []
    started = asyncio.Event()
    release = asyncio.Event()

    @app.task
    async def slow(n: int) -> int:
        ran.append(n)
        started.set()
        await release.wait()
        return n

    @app.task
    def quick(n: int) -> int:
        ran.append(("quick", n))
        return n

    # a lease and a node ttl longer than the clock moves: the running job, its node
    # seen silent for the minute skipped, would be rescued
    config = dataclasses.replace(FAST, expire_interval=0.05, lease_ttl=600.0, node_ttl=600.0)

    async def main() -> None:
        try:
            running = await slow.options(expires_in=5).enqueue_async(1)
            late_ids: list[int] = []

            async def during(worker: Any) -> None:
                await asyncio.wait_for(started.wait(), 30)
                late = await quick.options(delay=10, expires_in=20).enqueue_async(2)
                late_ids.append(late.id)
                await clock.advance_async(seconds=60)  # both past their expiry
                await wait_for_async(lambda: _final(app, late.id), timeout=30)
                release.set()

            async def done() -> bool:
                job = await _aget(app, running.id)
                return job.state is JobState.COMPLETED

            await run_worker_until(app, done, config, timeout=60, during=during)
            assert (await _aget(app, running.id)).result == 1
            late = await _aget(app, late_ids[0])
            assert late.state is JobState.CANCELLED, late
            assert late.errors[-1]["reason"] == "expired"
        finally:
            await app.close_async()

    asyncio.run(main())
    assert ran == [1]


async def _final(app: Conveyor, job_id: int) -> bool:
    return (await _aget(app, job_id)).state.is_final


def test_expired_error_names_the_reason() -> None:
    assert json.loads(expired_error()) == {
        "error": "expired: not started before its expires_at", "reason": "expired"}


# -- the dashboard -----------------------------------------------------------------------------


def test_the_dashboard_shows_and_finds_expired_jobs(
        clocked: tuple[Conveyor, VirtualClock]) -> None:
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient
    from conveyor.web import create_app

    app, clock = clocked
    ping, _ = _register(app, [])
    late = ping.options(expires_in=60).enqueue(1)
    waiting = ping.options(expires_in=6000).enqueue(2)
    cancelled = ping.enqueue(3)
    app.cancel_job(cancelled.id)
    clock.advance(seconds=61)
    assert _expire(app) == [late.id]
    with TestClient(create_app(app), base_url="http://localhost") as client:
        page = client.get(f"/jobs/{late.id}").text
        assert 'id="job-expires"' in page and "expired: cancelled before it started" in page
        assert "it never runs" in client.get(f"/jobs/{waiting.id}").text
        listing = client.get("/jobs")
        link = re.search(r'id="expired-jobs"[^>]*href="([^"]+)"', listing.text)
        assert link, "no link to the expired jobs"
        found = client.get(html.unescape(link.group(1))).text
        assert [int(i) for i in re.findall(r'<tr data-job="(\d+)"', found)] == [late.id]
        assert "expired: not started before its expires_at" in found


def test_an_operators_retry_lifts_the_expiry(clocked: tuple[Conveyor, VirtualClock]) -> None:
    app, clock = clocked
    ran: list[Any] = []
    ping, _ = _register(app, ran)
    one = ping.options(expires_in=10).enqueue(1)
    two = ping.options(expires_in=10).enqueue(2)
    clock.advance(seconds=11)
    assert sorted(_expire(app)) == [one.id, two.id]
    assert _get(app, app.retry_job(one.id).id).expires_at is None
    assert app.retry_matching(JobFilter(ids=(two.id,)), limit=10) == 1
    assert [o.id for o in app.drain().completed] == [one.id, two.id] and ran == [1, 2]
