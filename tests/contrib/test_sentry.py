"""conveyor.contrib.sentry with the real sentry-sdk, a capturing transport (no network)
and real workers on both backends."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from conveyor import Cancel, Conveyor, Discard, Snooze, Task, Throttle, WorkerConfig, current_job
from conveyor._runtime.cron import declare_schedules
from conveyor._storage import ScheduleAdvanceParams

from .._require import import_or_skip
from .._runtime_util import FAST, all_final, run_worker_until

sentry_sdk = import_or_skip("sentry_sdk", "sentry-sdk missing (the dev extra)")
from sentry_sdk.envelope import Envelope  # noqa: E402
from sentry_sdk.transport import Transport  # noqa: E402

from conveyor.contrib.sentry import install, monitor_slug, sentry_crontab  # noqa: E402

#: Backoff 0: a failed attempt is available again at once, so retries need no waiting.
NO_BACKOFF: dict[str, Any] = {"backoff": 0}


class Capture(Transport):
    """Keeps every envelope the SDK would have sent."""

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        super().__init__(options)
        self.items: list[tuple[str, dict[str, Any]]] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        for item in envelope.items:
            payload = item.payload.json
            if item.type in ("event", "check_in") and payload is not None:
                self.items.append((item.type, payload))

    def events(self) -> list[dict[str, Any]]:
        """The events sent, less asyncio's own error logs: "Task was destroyed but it is
        pending" for a loop another test left (a pool's tasks), logged whenever the
        collector meets it, is not something this test's app reported."""
        return [p for kind, p in self.items if kind == "event" and p.get("logger") != "asyncio"]

    def checkins(self) -> list[dict[str, Any]]:
        return [p for kind, p in self.items if kind == "check_in"]


@pytest.fixture
def sentry() -> Iterator[Capture]:
    transport = Capture()
    sentry_sdk.init(dsn="http://key@localhost/1", transport=transport)
    try:
        yield transport
    finally:
        sentry_sdk.get_client().close()
        sentry_sdk.init()  # no DSN: the SDK is off again for the next test


def drain(app: Conveyor, config: WorkerConfig = FAST) -> None:
    async def run() -> None:
        try:
            await run_worker_until(app, all_final(app), config)
        finally:
            await app.close_async()

    asyncio.run(run())


def tags(event: dict[str, Any]) -> dict[str, str]:
    raw = event["tags"]
    return dict(raw) if isinstance(raw, dict) else {k: v for k, v in raw}


def failing(app: Conveyor, kind: str) -> Task[Any, Any]:
    """A task that always raises, sync or async."""
    if kind == "async":
        async def broken_async(order: int, card: dict[str, str]) -> None:
            raise ValueError(f"order {order} is broken")

        task: Task[Any, Any] = app.task(name="broken", max_attempts=3, **NO_BACKOFF)(broken_async)
        return task

    def broken_sync(order: int, card: dict[str, str]) -> None:
        raise ValueError(f"order {order} is broken")

    plain: Task[Any, Any] = app.task(name="broken", max_attempts=3, **NO_BACKOFF)(broken_sync)
    return plain


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_final_failure_is_one_event_with_tags_context_and_traceback(
        app: Conveyor, sentry: Capture, kind: str) -> None:
    install(app)
    install(app)  # a second call changes nothing (one event, not two)
    task = failing(app, kind)
    job = task.enqueue(7, card={"number": "4111", "cvv": "123"})
    drain(app)

    assert app.get_job(job.id).state.value == "discarded"  # type: ignore[union-attr]
    [event] = sentry.events()
    assert tags(event) == {"conveyor.job_id": str(job.id), "conveyor.task": "broken",
                           "conveyor.queue": "default", "conveyor.attempt": "3",
                           "conveyor.final": "true"}
    [exc] = event["exception"]["values"]
    assert exc["type"] == "ValueError" and exc["value"] == "order 7 is broken"
    assert exc["mechanism"] == {"type": "conveyor", "handled": False}
    frames = [f["function"] for f in exc["stacktrace"]["frames"]]
    assert frames[-1] == f"broken_{kind}"  # the handler's own frame, where it raised
    context = event["contexts"]["conveyor_job"]
    assert context["id"] == job.id and context["attempt"] == 3 and context["max_attempts"] == 3
    assert context["args"] == [7]
    assert context["kwargs"] == {"card": {"number": "4111", "cvv": "[redacted]"}}
    assert isinstance(context["node"], str) and context["node"]
    assert event["transaction"] == "broken"


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_every_attempt_is_one_event_when_asked(app: Conveyor, sentry: Capture, kind: str) -> None:
    install(app, failures="attempt")
    task = failing(app, kind)
    job = task.enqueue(1, card={})
    drain(app)

    events = sentry.events()
    assert [tags(e)["conveyor.attempt"] for e in events] == ["1", "2", "3"]
    assert [tags(e)["conveyor.final"] for e in events] == ["false", "false", "true"]
    assert {tags(e)["conveyor.job_id"] for e in events} == {str(job.id)}


def test_a_failure_that_is_retried_then_succeeds_is_no_event_by_default(
        app: Conveyor, sentry: Capture) -> None:
    install(app)
    runs: list[int] = []

    @app.task(max_attempts=3, **NO_BACKOFF)
    def flaky() -> str:
        runs.append(1)
        if len(runs) < 2:
            raise ConnectionError("upstream down")
        return "ok"

    @app.task
    async def fine() -> int:
        return 1

    flaky.enqueue()
    fine.enqueue()
    drain(app)
    assert len(runs) == 2 and sentry.events() == []


def test_control_exceptions_and_arguments_left_out(app: Conveyor, sentry: Capture) -> None:
    install(app, failures="attempt", include_args=False)
    snoozed: list[int] = []

    @app.task(max_attempts=1)
    async def snoozy() -> None:
        if not snoozed:
            snoozed.append(1)
            raise Snooze(0)

    @app.task(max_attempts=1)
    def throttled() -> None:
        if len(snoozed) < 2:
            snoozed.append(2)
            raise Throttle(0)

    @app.task(max_attempts=1)
    async def cancelled() -> None:
        raise Cancel("refunded")

    @app.task(max_attempts=3)
    def discarded() -> None:
        raise Discard("no such user")

    @app.task(max_attempts=1)
    async def boom(password: str) -> None:
        raise RuntimeError("the only event")

    for task in (snoozy, throttled, cancelled, discarded):
        task.enqueue()
    boom.enqueue(password="hunter2")
    drain(app)

    counts = app.count_jobs()
    assert (counts["completed"], counts["cancelled"], counts["discarded"]) == (2, 1, 2)
    [event] = sentry.events()
    assert tags(event)["conveyor.task"] == "boom"
    assert "args" not in event["contexts"]["conveyor_job"]
    frames = event["exception"]["values"][0]["stacktrace"]["frames"]
    # Sentry scrubs the handler's own ``password``; Conveyor's frames, which hold the
    # whole job, are sent without their locals.
    assert "hunter2" not in repr([f.get("vars") for f in frames])
    assert [f["function"] for f in frames if "vars" in f] == ["boom"]
    assert not any(f["in_app"] for f in frames if f["module"].startswith("conveyor."))


def test_timeout_is_reported_with_its_own_message(app: Conveyor, sentry: Capture) -> None:
    install(app)

    @app.task(max_attempts=1, timeout=0.05)
    async def slow() -> None:
        await asyncio.sleep(30)

    slow.enqueue()
    drain(app)
    [event] = sentry.events()
    assert event["fingerprint"] == ["conveyor", "timeout", "slow"]
    assert "timeout of 0.05s" in event["message"]


def test_bad_option_is_refused(app: Conveyor) -> None:
    with pytest.raises(ValueError, match="failures must be"):
        install(app, failures="sometimes")  # type: ignore[arg-type]


# -- Sentry Crons ----------------------------------------------------------------------------


def _tick_now(app: Conveyor, name: str) -> None:
    """Write the app's schedules and move ``name``'s last tick two days back, so
    the leader's cron scheduler enqueues its newest tick on its first pass."""

    async def run() -> None:
        storage = await app.storage()
        await declare_schedules(app.schedules.values(), storage)
        now = await storage.clock_now()
        await storage.schedule_advance(ScheduleAdvanceParams(name, now - timedelta(days=2), None))
        await app.close_async()

    asyncio.run(run())


def _periodic_done(app: Conveyor) -> Callable[[], Any]:
    async def check() -> bool:
        jobs = await app.list_jobs_async()
        return bool(jobs) and all(j.state.is_final for j in jobs)

    return check


def _run_periodic(app: Conveyor) -> None:
    async def run() -> None:
        try:
            await run_worker_until(app, _periodic_done(app),
                                   dataclasses.replace(FAST, cron_interval=0.05))
        finally:
            await app.close_async()

    asyncio.run(run())


def test_periodic_job_sends_in_progress_then_ok(app: Conveyor, sentry: Capture) -> None:
    install(app, monitor_config={"checkin_margin": 5})

    @app.periodic(cron="*/5 * * * *", timezone="Europe/Paris", name="Nightly.Report",
                  timeout=90)
    def report() -> None:
        pass

    _tick_now(app, "Nightly.Report")
    _run_periodic(app)

    [job] = app.list_jobs()
    assert job.meta["schedule"] == "Nightly.Report" and job.meta["tick"]
    first, last = sentry.checkins()
    assert first["monitor_slug"] == last["monitor_slug"] == "nightly-report"
    assert (first["status"], last["status"]) == ("in_progress", "ok")
    assert first["check_in_id"] == last["check_in_id"]
    assert last["duration"] is not None and last["duration"] >= 0
    assert first["monitor_config"] == {
        "schedule": {"type": "crontab", "value": "*/5 * * * *"},
        "timezone": "Europe/Paris", "max_runtime": 2, "checkin_margin": 5}
    assert sentry.events() == []


def test_failing_periodic_job_sends_error_and_one_event(app: Conveyor, sentry: Capture) -> None:
    install(app)

    @app.periodic(cron="0 3 * * *", max_attempts=1)
    async def cleanup() -> None:
        raise OSError("disk gone")

    _tick_now(app, "cleanup")
    _run_periodic(app)

    statuses = [c["status"] for c in sentry.checkins()]
    assert statuses == ["in_progress", "error"]
    [event] = sentry.events()
    assert tags(event)["conveyor.schedule"] == "cleanup"
    assert event["exception"]["values"][0]["type"] == "OSError"


def test_manual_runs_and_plain_jobs_send_no_check_in(app: Conveyor, sentry: Capture) -> None:
    install(app)

    @app.periodic(cron="0 3 * * *")
    async def nightly() -> None:
        pass

    async def trigger() -> None:
        await declare_schedules(app.schedules.values(), await app.storage())
        await app.trigger_schedule_async("nightly")  # a manual run: no tick
        await app.close_async()

    asyncio.run(trigger())
    nightly.enqueue()
    drain(app)
    assert app.count_jobs()["completed"] == 2
    assert sentry.checkins() == []


@pytest.mark.parametrize(("expr", "expected"), [
    ("*/5 * * * *", "*/5 * * * *"),
    ("  0   0 * *  * ", "0 0 * * *"),
    ("0 9-17/2 * * 1-5", "0 9-17/2 * * 1-5"),
    ("* * * * * *", None),          # a seconds field: Sentry has none
    ("0 0 L * *", None),            # not every parser knows L
    ("0 0 1 * 1", None),            # day of month and day of week combine differently
    ("0 0 * JAN *", None),
])
def test_crontab_translation(expr: str, expected: str | None) -> None:
    assert sentry_crontab(expr) == expected


def test_monitor_slug() -> None:
    assert monitor_slug("Billing: Nightly Invoices!") == "billing-nightly-invoices"
    assert len(monitor_slug("x" * 80)) == 50
    assert monitor_slug("***") == "conveyor-schedule"


def test_a_job_no_handler_runs_for_is_reported_by_the_logging_integration(
        db_url: str, sentry: Capture) -> None:
    """An unknown task never reaches the middleware: the worker's error log when it
    gives up on the job (after ``unknown_task_timeout``) is the event (Sentry's default
    logging integration), with the job in its extra data; the warnings while the job
    waits for a worker that knows the task are breadcrumbs, not events."""
    producer = Conveyor(db_url)

    @producer.task
    def ghost() -> None: ...

    job = ghost.enqueue()
    producer.close()
    worker_app = Conveyor(db_url)
    try:
        install(worker_app)
        drain(worker_app, dataclasses.replace(FAST, unknown_task_timeout=1.0))
        [event] = sentry.events()
        assert event["logger"] == "conveyor.job"
        assert "unknown task 'ghost'" in event["logentry"]["message"]
        assert event["extra"]["job_id"] == job.id and event["extra"]["task"] == "ghost"
    finally:
        worker_app.close()


def test_jobs_the_worker_stops_are_no_error(app: Conveyor, sentry: Capture) -> None:
    """``app.cancel_job`` on running periodic jobs, one async and one sync: no event,
    and their check-ins are left open (not ``ok``, not ``error``)."""
    install(app, failures="attempt")

    @app.periodic(cron="0 3 * * *", max_attempts=1)
    async def hang() -> None:
        await asyncio.sleep(60)

    @app.periodic(cron="0 4 * * *", max_attempts=1)
    def spin() -> None:  # sync: it sees the cancel and returns
        while not current_job().cancelled:
            time.sleep(0.005)

    _tick_now(app, "hang")
    _tick_now(app, "spin")

    async def cancel_both(worker: Any) -> None:
        deadline = time.monotonic() + 20
        while len(running := await app.list_jobs_async(state="running")) < 2:
            assert time.monotonic() < deadline, "both jobs should be running"
            await asyncio.sleep(0.01)
        for job in running:
            await app.cancel_job_async(job.id)

    async def run() -> None:
        try:
            await run_worker_until(app, all_final(app), dataclasses.replace(FAST, cron_interval=0.05),
                                   during=cancel_both)
        finally:
            await app.close_async()

    asyncio.run(run())
    assert app.count_jobs()["cancelled"] == 2
    assert sentry.events() == []
    assert [c["status"] for c in sentry.checkins()] == ["in_progress", "in_progress"]


def test_a_snoozed_periodic_job_continues_its_check_in(app: Conveyor, sentry: Capture) -> None:
    """A snooze uses no attempt: the next run continues the same check-in, then ``ok``."""
    install(app)
    runs: list[int] = []

    @app.periodic(cron="0 3 * * *")
    async def later() -> None:
        runs.append(1)
        if len(runs) == 1:
            raise Snooze(0)

    _tick_now(app, "later")
    _run_periodic(app)
    checkins = sentry.checkins()
    assert [c["status"] for c in checkins] == ["in_progress", "in_progress", "ok"]
    assert len({c["check_in_id"] for c in checkins}) == 1
    assert sentry.events() == []


def test_a_schedule_added_at_runtime_gets_its_config_from_the_database(
        app: Conveyor, sentry: Capture) -> None:
    install(app)

    @app.task
    def export() -> None:
        pass

    app.add_schedule("exports", task="export", cron="0 * * * *", timezone="America/New_York")
    _tick_now(app, "exports")
    _run_periodic(app)
    first, last = sentry.checkins()
    assert (first["status"], last["status"]) == ("in_progress", "ok")
    assert first["monitor_config"] == {"schedule": {"type": "crontab", "value": "0 * * * *"},
                                       "timezone": "America/New_York"}


def test_a_failing_redactor_does_not_fail_the_job(app: Conveyor, sentry: Capture) -> None:
    def broken_redactor(job: Any) -> Any:
        raise RuntimeError("redactor bug")

    install(app, redact=broken_redactor)

    @app.task
    def fine() -> int:
        return 1

    job = fine.enqueue()
    drain(app)
    assert app.get_job(job.id).state.value == "completed"  # type: ignore[union-attr]


def test_without_sentry_init_jobs_run_as_usual(app: Conveyor) -> None:
    install(app)

    @app.task(max_attempts=1)
    async def boom() -> None:
        raise ValueError("nobody listens")

    job = boom.enqueue()
    drain(app)
    assert app.get_job(job.id).state.value == "discarded"  # type: ignore[union-attr]


def test_without_the_extra_the_import_error_says_what_to_install() -> None:
    import subprocess
    import sys

    code = ("import sys; sys.modules['sentry_sdk'] = None; import conveyor; "
            "import conveyor.contrib.sentry")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "pip install 'conveyor[sentry]'" in done.stderr
