"""drain(): every due job runs in-process until none is left; the result says what
each attempt did. And the assertions, read through the app's public reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from conveyor import Cancel, Conveyor, DatabaseUnavailableError, JobState, Snooze
from conveyor.testing import assert_enqueued, enqueued_jobs, refute_enqueued


def test_drain_runs_everything_due_and_reports_it(conveyor_app: Conveyor) -> None:
    app = conveyor_app

    @app.task
    def ok(n: int) -> int:
        return n * 2

    @app.task(max_attempts=2, backoff=600)
    def fails() -> None:
        raise ValueError("nope")

    @app.task(queue="other")
    def cancels() -> None:
        raise Cancel("why")

    @app.task
    def snoozes() -> None:
        raise Snooze(60)

    @app.task
    def chain(n: int) -> None:
        if n:
            chain.enqueue(n - 1)  # enqueued while draining: drained too

    ok.enqueue(1)
    ok.enqueue(2)
    fails.enqueue()
    cancels.enqueue()
    snoozes.enqueue()
    chain.enqueue(2)
    later = ok.options(delay=3600).enqueue(9)

    result = app.drain()
    assert sorted(o.result for o in result.completed if o.task == "ok") == [2, 4]
    assert [o.task for o in result.retried] == ["fails"]
    assert result.errors == ["ValueError: nope", "cancelled: why"]
    assert [o.task for o in result.cancelled] == ["cancels"]
    assert [o.task for o in result.snoozed] == ["snoozes"]
    assert len([o for o in result.completed if o.task == "chain"]) == 3
    assert app.get_job(later.id).state is JobState.SCHEDULED  # type: ignore[union-attr]
    assert len(app.drain()) == 0  # nothing left

    # include_scheduled: the delayed job, the retry (until out of attempts) and the snooze
    everything = app.drain(include_scheduled=True, max_jobs=3)
    assert len(everything) == 3
    rest = app.drain(include_scheduled=True, queues=["default"], max_jobs=10)
    kinds = {o.task: o.kind for o in [*everything, *rest]}
    assert kinds["ok"] == "completed" and kinds["fails"] == "discarded"


def test_drain_respects_queues_max_jobs_and_pauses(conveyor_app: Conveyor) -> None:
    app = conveyor_app

    @app.task(queue="a")
    def in_a() -> None: ...

    @app.task(queue="b")
    def in_b() -> None: ...

    for _ in range(3):
        in_a.enqueue()
        in_b.enqueue()
    assert {o.queue for o in app.drain(queues=["b"])} == {"b"}
    assert len(app.drain(max_jobs=2)) == 2
    app.pause_queue("a")
    assert len(app.drain()) == 0
    app.resume_queue("a")
    assert len(app.drain()) == 1
    with pytest.raises(ValueError):
        app.drain(max_jobs=0)
    with pytest.raises(TypeError):
        app.drain(queues="a")


def test_assertions_pass_fail_and_say_what_was_enqueued(conveyor_app: Conveyor) -> None:
    app = conveyor_app

    @app.task(queue="mail")
    def send(to: str, subject: str = "") -> None: ...

    @app.task
    def other() -> None: ...

    send.enqueue("ada@example.com", subject="hi")
    send.enqueue("bob@example.com")
    other.enqueue()

    found = assert_enqueued(send, args=["ada@example.com"], kwargs={"subject": "hi"},
                            queue="mail", count=1)
    assert found[0].args == ["ada@example.com"]
    assert_enqueued(send, count=2)
    assert_enqueued("other", app=app)
    refute_enqueued(send, args=["eve@example.com"])
    refute_enqueued(send, queue="default")
    assert [j.args for j in enqueued_jobs(send)] == [["ada@example.com"], ["bob@example.com"]]
    assert len(enqueued_jobs(app=app, state="available")) == 3

    with pytest.raises(AssertionError) as missing:
        assert_enqueued(send, args=["eve@example.com"])
    message = str(missing.value)
    assert "send(args=['eve@example.com'])" in message
    assert "'bob@example.com'" in message and "other(" in message  # what was there instead
    with pytest.raises(AssertionError, match="exactly 3"):
        assert_enqueued(send, count=3)
    with pytest.raises(AssertionError, match="expected no send"):
        refute_enqueued(send, args=["bob@example.com"])
    with pytest.raises(TypeError):
        assert_enqueued("send")  # a name needs app=
    with pytest.raises(ValueError):
        assert_enqueued(send, count=-1)


def test_a_dead_database_is_a_clear_error_and_inline_loses_nothing(tmp_path: Path) -> None:
    dead = Conveyor("postgresql://postgres@127.0.0.1:1/nowhere")
    try:
        with pytest.raises(DatabaseUnavailableError, match="cannot use PostgreSQL"):
            dead.drain()
        with pytest.raises(DatabaseUnavailableError):
            dead.drain(max_jobs=1, queues=["default"])
    finally:
        dead.close()
    app = Conveyor(f"sqlite:///{tmp_path / 'jobs.db'}")
    try:
        @app.task
        def crash() -> None:
            raise SystemExit(3)  # even this is the attempt's failure, stored

        with app.inline():
            job = crash.enqueue()
        assert job.state is JobState.RETRYABLE and "SystemExit" in job.errors[0]["error"]
    finally:
        app.close()
