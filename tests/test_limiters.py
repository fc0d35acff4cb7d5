"""Limiters (``app.limiter``) inside handlers and outside jobs, on both backends.

Timings are checked soundly under load: a grant happened somewhere between the moment
its caller asked and the moment it returned, so "rate + 1 grants inside less than a
second" is only concluded when even those outer bounds fit in less than a second, and
two holders overlapped only when what each did while it surely held overlaps.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor import (
    Conveyor,
    DatabaseUnavailableError,
    Limiter,
    LimitExceeded,
    Permit,
)
from conveyor._storage import LimiterSlotParams

from ._runtime_util import run_then_close
from .conftest import wait_for

Span = tuple[float, float]


def rate_violations(spans: list[Span], count: int, period: float = 1.0,
                    slack: float = 0.01) -> list[Span]:
    """Sets of ``count + 1`` grants that surely fell inside less than ``period``: for
    each earliest ask, the (count + 1)-th earliest return among the grants asked no
    sooner. ``slack`` covers the database clock's resolution (SQLite: 1 ms)."""
    bad = []
    spans = sorted(spans)
    for i, (asked, _) in enumerate(spans):
        returns = sorted(done for _, done in spans[i:])
        if len(returns) > count and returns[count] - asked < period - slack:
            bad.append((asked, returns[count]))
    return bad


def most_at_once(spans: list[Span]) -> int:
    """The most ``spans`` (what each holder did while it surely held) that overlap."""
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans],
                   key=lambda e: (e[0], e[1]))
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def test_the_checks_can_fail() -> None:
    assert rate_violations([(0.0, 0.01), (0.1, 0.11), (0.2, 0.21)], 2) != []
    assert rate_violations([(0.0, 0.01), (0.5, 0.51), (1.0, 1.01)], 2) == []
    assert most_at_once([(0, 2), (1, 3), (1.5, 4)]) == 3
    assert most_at_once([(0, 1), (1, 2)]) == 1


def threads(n: int, body: Callable[[int], None]) -> None:
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            body(i)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert not errors, errors


def test_a_rate_limiter_never_grants_more_than_its_rate_in_a_second(app: Conveyor) -> None:
    slack = app.limiter("slack", rate="10/s")
    spans: list[Span] = []

    def body(_: int) -> None:
        for _ in range(8):
            asked = time.monotonic()
            with slack:
                spans.append((asked, time.monotonic()))

    started = time.monotonic()
    threads(3, body)
    assert len(spans) == 24
    assert rate_violations(spans, 10) == []
    assert time.monotonic() - started >= 2.3 - 0.01  # 24 starts 0.1 s apart


def test_a_keyed_rate_limiter_keeps_one_budget_per_key(app: Conveyor) -> None:
    per_account = app.limiter("per-account", rate="1/m")
    per_account.acquire(key=1)
    per_account.acquire(key="2")  # another key: its own budget
    with pytest.raises(LimitExceeded) as refused:
        per_account.acquire(key=1, timeout=0.5)
    assert refused.value.name == "per-account" and refused.value.key == "1"
    assert 55 < refused.value.retry_after <= 60


def test_a_concurrency_limiter_never_has_more_holders_than_its_limit(app: Conveyor) -> None:
    ocr = app.limiter("ocr", concurrency=2)
    spans: list[Span] = []

    def body(_: int) -> None:
        for _ in range(3):
            with ocr.hold(timeout=60):
                inside = time.monotonic()
                time.sleep(0.05)
                spans.append((inside, time.monotonic()))

    threads(5, body)
    assert len(spans) == 15
    assert most_at_once(spans) <= 2
    assert [r.holders for r in app.list_limiters() if r.name == "ocr"] == [()]


def test_keys_are_independent_and_a_refusal_leaks_nothing(app: Conveyor) -> None:
    ocr = app.limiter("ocr", concurrency=1)
    held = ocr.acquire(key="acme")
    other = ocr.acquire(key="globex", timeout=0)
    with pytest.raises(LimitExceeded, match="limiter 'ocr' \\(key 'acme'\\)"):
        ocr.acquire(key="acme", timeout=0.2)
    (row,) = app.list_limiters()
    assert (row.name, row.concurrency, row.rate) == ("ocr", 1, None)
    assert sorted(h.key for h in row.holders) == ["acme", "globex"]
    assert {h.holder for h in row.holders} == {held.holder, other.holder}
    held.release()
    held.release()  # twice is harmless
    other.release()
    assert app.list_limiters()[0].holders == ()
    with ocr.hold(key="acme", timeout=0):
        pass


def test_the_async_forms(app: Conveyor) -> None:
    ocr = app.limiter("ocr", concurrency=1)
    slack = app.limiter("slack", rate="100/s")

    async def main() -> None:
        async with ocr as permit:
            assert isinstance(permit, Permit)
            with pytest.raises(LimitExceeded):
                await ocr.acquire_async(timeout=0.1)
            async with slack, slack.hold(key="x"):
                pass
        permit = await ocr.acquire_async(key=5, timeout=5)
        assert [h.key for h in (await app.list_limiters_async())[0].holders] == ["5"]
        await permit.release_async()
        async with ocr.hold(key=5, timeout=0):
            pass
        assert all(r.holders == () for r in await app.list_limiters_async())

    run_then_close(app, main)


def test_a_dead_holders_slot_frees_when_its_lease_runs_out(app: Conveyor) -> None:
    """A holder that stopped renewing (as one killed with kill -9): its slot is free once
    its lease ran out, not before."""
    ocr = app.limiter("ocr", concurrency=1)

    async def dead_holder() -> None:
        storage = await app.storage()
        assert await storage.limiter_slot_acquire(LimiterSlotParams("ocr", "", "dead", 1, 1.5))

    run_then_close(app, dead_holder)
    with pytest.raises(LimitExceeded):
        ocr.acquire(timeout=0.3)
    started = time.monotonic()
    permit = ocr.acquire(timeout=30)
    assert time.monotonic() - started < 30
    assert [h.holder for h in app.list_limiters()[0].holders] == [permit.holder]
    permit.release()


def test_a_live_holder_renews_its_lease(app: Conveyor) -> None:
    ocr = app.limiter("ocr", concurrency=1, lease=1.5)
    with ocr:
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:  # over two leases long: never taken over
            with pytest.raises(LimitExceeded):
                ocr.acquire(timeout=0.1)
    with ocr.hold(timeout=0):
        pass


def test_a_limit_in_a_handler_snoozes_the_job_without_an_attempt(app: Conveyor) -> None:
    ocr = app.limiter("ocr", concurrency=1, wait=0.2)
    ran: list[int] = []

    @app.task
    def scan(n: int) -> int:
        with ocr.hold(key="acme"):
            ran.append(n)
        return n

    @app.task
    async def scan_async(n: int) -> int:
        async with ocr.hold(key="acme"):
            ran.append(n)
        return n

    outsider = ocr.acquire(key="acme")
    jobs = [scan.enqueue(1), scan_async.enqueue(2)]
    result = app.drain()
    assert len(result.snoozed) == 2 and ran == []
    for job in jobs:
        found = app.get_job(job.id)
        assert found is not None and found.state.value == "scheduled" and found.attempt == 0
    outsider.release()
    result = app.drain(include_scheduled=True)
    assert sorted(ran) == [1, 2] and len(result.completed) == 2
    assert [app.get_job(j.id).attempt for j in jobs] == [1, 1]  # type: ignore[union-attr]


def test_a_rate_limit_in_a_handler_snoozes_until_the_next_start(app: Conveyor) -> None:
    hourly = app.limiter("hourly", rate="1/h")

    @app.task
    def ping() -> None:
        with hourly:
            pass

    first, second = ping.enqueue(), ping.enqueue()
    result = app.drain()
    assert len(result.completed) == 1 and len(result.snoozed) == 1
    assert {result.completed[0].id, result.snoozed[0].id} == {first.id, second.id}
    later = app.get_job(result.snoozed[0].id)
    assert later is not None and later.state.value == "scheduled" and later.attempt == 0
    assert later.scheduled_at is not None and later.created_at is not None
    assert (later.scheduled_at - later.created_at).total_seconds() > 3000  # the next start


# -- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({}, ValueError, "needs rate="),
    ({"rate": 20}, TypeError, "rate must be a str"),
    ({"rate": "20 per second"}, ValueError, "invalid rate"),
    ({"rate": "0/s"}, ValueError, "invalid rate"),
    ({"concurrency": 0}, ValueError, "concurrency must be >= 1"),
    ({"concurrency": -3}, ValueError, "concurrency must be >= 1"),
    ({"concurrency": "3"}, TypeError, "concurrency must be an int"),
    ({"concurrency": True}, TypeError, "concurrency must be an int"),
    ({"concurrency": 2.5}, TypeError, "concurrency must be an int"),
    ({"concurrency": 1, "lease": 0}, ValueError, "lease"),
    ({"concurrency": 1, "lease": "30"}, TypeError, "lease"),
    ({"concurrency": 1, "wait": -1}, ValueError, "wait"),
    ({"concurrency": 1, "timeout": float("inf")}, ValueError, "timeout"),
    ({"rate": "1/s", "burst": 0}, ValueError, "burst"),
])
def test_bad_settings_are_refused(tmp_path: Path, kwargs: dict[str, object],
                                  error: type[Exception], match: str) -> None:
    app = Conveyor(f"sqlite:///{tmp_path}/jobs.db")
    with pytest.raises(error, match=match):
        app.limiter("x", **kwargs)  # type: ignore[arg-type]
    assert app.limiters == {}


@pytest.mark.parametrize(("name", "error"), [
    ("", ValueError), ("has space", ValueError), ("x" * 101, ValueError), (None, TypeError),
    (7, TypeError), ("-dash-first", ValueError),
])
def test_bad_names_are_refused(tmp_path: Path, name: object, error: type[Exception]) -> None:
    app = Conveyor(f"sqlite:///{tmp_path}/jobs.db")
    with pytest.raises(error, match="limiter"):
        app.limiter(name, concurrency=1)  # type: ignore[arg-type]


def test_bad_keys_and_waits_are_refused_before_the_database(tmp_path: Path) -> None:
    app = Conveyor(f"sqlite:///{tmp_path}/missing/jobs.db")  # nothing is ever opened
    ocr = app.limiter("ocr", concurrency=1)
    for key, error in [(1.5, TypeError), (True, TypeError), (["a"], TypeError),
                       ("", ValueError), ("k" * 201, ValueError)]:
        with pytest.raises(error, match="limiter key"):
            ocr.acquire(key=key)  # type: ignore[arg-type]
        with pytest.raises(error, match="limiter key"):
            ocr.hold(key=key)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        ocr.acquire(timeout=-1)
    with pytest.raises(TypeError, match="timeout"):
        ocr.acquire(timeout="soon")  # type: ignore[arg-type]


def test_one_name_one_meaning(tmp_path: Path) -> None:
    app = Conveyor(f"sqlite:///{tmp_path}/jobs.db")
    ocr = app.limiter("ocr", concurrency=3)
    assert app.limiter("ocr", concurrency=3) is ocr
    assert isinstance(ocr, Limiter) and "concurrency=3" in repr(ocr)
    with pytest.raises(ValueError, match="already declared"):
        app.limiter("ocr", concurrency=4)
    with pytest.raises(ValueError, match="already declared"):
        app.limiter("ocr", rate="3/s")


@pytest.mark.parametrize("url", ["postgresql://postgres@127.0.0.1:1/conveyor_gone",
                                 "sqlite:////nonexistent-dir/conveyor/jobs.db"])
def test_a_dead_database_is_a_clear_error(url: str) -> None:
    app = Conveyor(url)
    try:
        for limiter in (app.limiter("ocr", concurrency=1), app.limiter("slack", rate="5/s")):
            with pytest.raises(DatabaseUnavailableError):
                limiter.acquire(timeout=1)
            with pytest.raises(DatabaseUnavailableError), limiter:
                pass
    finally:
        app.close()


def test_a_holder_whose_database_went_away_leaks_no_slot(app: Conveyor, db_url: str) -> None:
    """The database goes away under a holder: acquiring fails clearly, and the slot
    granted before is free again once its lease ran out, whatever became of the holder."""
    ocr = app.limiter("ocr", concurrency=1, lease=1.0)
    permit = ocr.acquire()
    dead = Conveyor("postgresql://postgres@127.0.0.1:1/conveyor_gone"
                    if db_url.startswith("postgres") else "sqlite:////nonexistent-dir/j.db")
    try:
        with pytest.raises(DatabaseUnavailableError):
            dead.limiter("ocr", concurrency=1, lease=1.0).acquire(timeout=1)
    finally:
        dead.close()
    permit._renewing.cancel()  # type: ignore[union-attr]  # the holder stops renewing
    wait_for(lambda: app.list_limiters()[0].holders == (), timeout=30,
             message="the unrenewed lease to run out")
    with ocr.hold(timeout=0):
        pass


def test_sync_and_async_holders_share_the_limit(app: Conveyor) -> None:
    ocr = app.limiter("ocr", concurrency=1)
    sync_permit = ocr.acquire()

    async def main() -> None:
        with pytest.raises(LimitExceeded):
            await ocr.acquire_async(timeout=0.1)
        sync_permit.release()
        permit = await asyncio.wait_for(ocr.acquire_async(timeout=10), 20)
        await permit.release_async()

    run_then_close(app, main)


def test_closing_the_app_gives_back_the_slots_it_holds(db_url: str) -> None:
    holder, other = Conveyor(db_url), Conveyor(db_url)
    try:
        permit = holder.limiter("ocr", concurrency=1).acquire(key="acme")
        assert ":job-" not in permit.holder  # outside a job
        holder.close()  # no lease left to run out: the slot is free at once
        with other.limiter("ocr", concurrency=1).hold(key="acme", timeout=0):
            pass
        permit.release()  # after the close: nothing left to do
    finally:
        holder.close()
        other.close()


def test_limiters_under_drain_with_a_virtual_clock(db_url: str) -> None:
    """The testing toolkit: a rate limiter measures the virtual clock, so a job over
    budget is snoozed at once (waiting would not move that clock) and runs once the
    test advances it."""
    from conveyor.testing import VirtualClock

    clock = VirtualClock()
    app = Conveyor(db_url, clock=clock)
    try:
        per_minute = app.limiter("per-minute", rate="1/m", wait=30)
        ocr = app.limiter("ocr", concurrency=1, wait=0)
        holders: list[str] = []

        @app.task
        def ping() -> None:
            with per_minute, ocr.hold() as permit:
                holders.append(permit.holder)

        first, second = ping.enqueue(), ping.enqueue()
        started = time.monotonic()
        result = app.drain()
        assert time.monotonic() - started < 20  # not 30 s of waiting for a frozen clock
        assert len(result.completed) == 1 and len(result.snoozed) == 1
        assert {j.id for j in result.completed + result.snoozed} == {first.id, second.id}
        assert len(app.drain().completed) == 0  # not due yet on the virtual clock
        clock.advance(minutes=1)
        assert len(app.drain().completed) == 1
        assert len(holders) == 2 and all(":job-" in h for h in holders)
    finally:
        app.close()


def test_the_sync_forms_refuse_to_block_an_event_loop(app: Conveyor) -> None:
    ocr = app.limiter("ocr", concurrency=1)

    @app.task
    async def wrong() -> None:
        with ocr:  # blocks the worker's loop: refused, the job fails with why
            pass

    async def main() -> None:
        forms: list[Callable[[], object]] = [
            lambda: ocr.acquire(), lambda: ocr.hold().__enter__(), lambda: ocr.__enter__()]
        for form in forms:
            with pytest.raises(RuntimeError, match="async with limiter"):
                form()

    run_then_close(app, main)
    wrong.enqueue()
    result = app.drain()
    assert len(result.retried) == 1 and "async with limiter" in (result.retried[0].error or "")
    assert app.list_limiters()[0].holders == ()


def test_limiters_in_inline_mode(app: Conveyor) -> None:
    ocr = app.limiter("ocr", concurrency=1, wait=0)
    ran: list[int] = []

    @app.task
    async def scan(n: int) -> None:
        async with ocr.hold(key="acme"):
            ran.append(n)

    with app.inline():
        scan.enqueue(1)  # runs now, in the caller, under the limiter
        outsider = ocr.acquire(key="acme")
        job = scan.enqueue(2)  # refused at once (wait=0): snoozed, no attempt used
        outsider.release()
    found = app.get_job(job.id)
    assert ran == [1] and found is not None
    assert found.state.value == "scheduled" and found.attempt == 0
