"""Enqueueing: the typed API, bulk inserts, transactions, and refusal of bad input."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from conveyor import (
    Conveyor,
    ConveyorConfig,
    DatabaseUnavailableError,
    InvalidStateError,
    JobNotFoundError,
    JobState,
    PayloadTooLargeError,
)


def _tasks(app: Conveyor) -> tuple[Any, Any]:
    @app.task(queue="mail", priority=3, max_attempts=7)
    async def send_email(to: str, subject: str = "") -> None: ...

    @app.task
    def resize(path: str, width: int = 800) -> dict[str, int]:
        return {"width": width}

    return send_email, resize


def test_enqueue_uses_task_defaults_and_options(app: Conveyor) -> None:
    send_email, resize = _tasks(app)
    job = send_email.enqueue("a@b.c", subject="hi")
    assert (job.task, job.queue, job.priority, job.max_attempts) == ("send_email", "mail", 3, 7)
    assert job.args == ["a@b.c"] and job.kwargs == {"subject": "hi"} and job.state == JobState.AVAILABLE
    later = send_email.options(delay=30, priority=5, queue="bulk", max_attempts=2,
                               tags=["x"], meta={"trace": "t1"}).enqueue("z@b.c")
    assert later.state == JobState.SCHEDULED and later.queue == "bulk" and later.priority == 5
    assert later.tags == ["x"] and later.meta == {"trace": "t1"} and later.max_attempts == 2
    assert later.scheduled_at - later.created_at >= timedelta(seconds=29)
    at = datetime.now(UTC) + timedelta(hours=1)
    timed = resize.options(run_at=at).enqueue("/p.png")
    assert abs((timed.scheduled_at - at).total_seconds()) < 1 and timed.state == JobState.SCHEDULED
    assert app.get_job(job.id) == job


def test_enqueue_async_and_many_in_one_batch(app: Conveyor) -> None:
    send_email, resize = _tasks(app)

    async def main() -> None:
        one = await send_email.enqueue_async("a@b.c")
        many = await app.enqueue_many_async([send_email.job("x@y.z", subject="s"), resize.job("/p")])
        assert [j.task for j in many] == ["send_email", "resize"] and many[0].id > one.id
        await app.close_async()

    asyncio.run(main())
    jobs = app.enqueue_many([resize.job(f"/{i}.png") for i in range(500)])
    assert len(jobs) == 500 and jobs[0].args == ["/0.png"] and jobs[-1].args == ["/499.png"]
    assert app.enqueue_many([]) == []
    assert app.count_jobs()["available"] == 503


def test_unserialisable_argument_is_named_and_nothing_is_written(app: Conveyor) -> None:
    send_email, resize = _tasks(app)
    with pytest.raises(TypeError, match=r"argument 'subject' of task 'send_email'.*not JSON"):
        send_email.enqueue("a@b.c", subject=object())
    # Sets and bytes are stored since issue 14 (tests/test_arguments.py); a lock is not.
    with pytest.raises(TypeError, match=r"argument 'path' \(#0\).*_thread.lock"):
        resize.enqueue({1, 2, threading.Lock()})
    with pytest.raises(TypeError, match="not JSON"):
        resize.enqueue("/p", width=float("nan"))
    # One bad job in a batch: the whole batch is refused.
    with pytest.raises(TypeError):
        app.enqueue_many([resize.job("/ok"), resize.job(object())])
    assert sum(app.count_jobs().values()) == 0


def test_arguments_must_fit_the_signature(app: Conveyor) -> None:
    send_email, _ = _tasks(app)
    with pytest.raises(TypeError, match=r"arguments do not fit task 'send_email'"):
        send_email.enqueue()
    with pytest.raises(TypeError, match="unexpected keyword"):
        send_email.enqueue("a", body="x")
    assert sum(app.count_jobs().values()) == 0


def test_payload_over_the_cap_is_refused(db_url: str) -> None:
    app = Conveyor(db_url, config=ConveyorConfig(max_payload_bytes=1000))
    _, resize = _tasks(app)
    try:
        with pytest.raises(PayloadTooLargeError, match="over the cap of 1000 bytes"):
            resize.enqueue("x" * 2000)
        resize.enqueue("x" * 100)
        assert sum(app.count_jobs().values()) == 1
    finally:
        app.close()


def test_default_payload_cap_is_one_mebibyte(app: Conveyor) -> None:
    _, resize = _tasks(app)
    with pytest.raises(PayloadTooLargeError):
        resize.enqueue("x" * (1024 * 1024 + 1))
    assert resize.enqueue("x" * 500_000).args[0] == "x" * 500_000


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"queue": "bad queue!"}, "invalid queue name"),
        ({"queue": ""}, "queue name is empty"),  # refused, not turned into "default"
        ({"priority": 10**6}, "priority"),
        ({"priority": "high"}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"delay": "soon"}, "delay"),
        ({"delay": 1e20}, "100 years"),
        ({"delay": -1}, "100 years"),
        ({"tags": "not-a-list"}, "tags"),
        ({"run_at": datetime(2030, 1, 1)}, "timezone-aware"),
    ],
)
def test_invalid_options_are_refused(app: Conveyor, options: dict[str, Any], error: str | None) -> None:
    _, resize = _tasks(app)
    if error is None:
        assert resize.options(**options).enqueue("/p").queue == "default"
        return
    with pytest.raises((ValueError, TypeError), match=error):
        resize.options(**options).enqueue("/p")
    assert sum(app.count_jobs().values()) == 0


def test_invalid_task_names_and_duplicates_are_refused(app: Conveyor) -> None:
    def f() -> None: ...

    with pytest.raises(ValueError, match="invalid task name"):
        app.task(name="bad name")(f)
    with pytest.raises(ValueError, match="invalid queue name"):
        app.task(queue="a/b")(f)
    app.task(f)
    with pytest.raises(ValueError, match="already registered"):
        app.task(f)
    with pytest.raises(ValueError, match="invalid task name"):
        app.list_jobs(task="drop table;")


def test_inspection_errors_are_clear(app: Conveyor) -> None:
    _, resize = _tasks(app)
    with pytest.raises(JobNotFoundError):
        app.retry_job(123456)
    with pytest.raises(JobNotFoundError):
        app.cancel_job(123456)
    with pytest.raises(TypeError, match="positive int"):
        app.get_job("1")  # type: ignore[arg-type]
    job = resize.enqueue("/p")
    app.cancel_job(job.id)
    with pytest.raises(InvalidStateError, match="is cancelled"):
        app.cancel_job(job.id)
    assert app.retry_job(job.id).state == JobState.AVAILABLE
    with pytest.raises(ValueError):
        app.list_jobs(state="sleeping")
    with pytest.raises(ValueError):
        app.list_jobs(limit=0)


def test_transactional_enqueue_follows_the_callers_transaction(app: Conveyor, db_url: str) -> None:
    _, resize = _tasks(app)
    if db_url.startswith("sqlite"):
        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"))
        try:
            with conn:  # commits
                kept = resize.enqueue("/kept", connection=conn)
            conn.execute("BEGIN")
            resize.enqueue("/gone", connection=conn)
            conn.rollback()
        finally:
            conn.close()
    else:
        with psycopg.connect(db_url) as pg:
            with pg.transaction():
                kept = resize.enqueue("/kept", connection=pg)
            with pytest.raises(ZeroDivisionError), pg.transaction():
                resize.enqueue("/gone", connection=pg)
                raise ZeroDivisionError
    jobs = app.list_jobs()
    assert [j.args for j in jobs] == [["/kept"]] and jobs[0].id == kept.id


def test_transactional_enqueue_with_an_async_connection(app: Conveyor, db_url: str) -> None:
    if not db_url.startswith("postgres"):
        pytest.skip("async caller connections are a psycopg feature")
    send_email, _ = _tasks(app)

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(db_url) as conn:
            async with conn.transaction():
                await send_email.options(connection=conn).enqueue_async("kept@x")
            with pytest.raises(ZeroDivisionError):
                async with conn.transaction():
                    await send_email.enqueue_async("gone@x", connection=conn)
                    raise ZeroDivisionError

    asyncio.run(main())
    assert [j.args for j in app.list_jobs()] == [["kept@x"]]


def test_a_dead_database_gives_one_clear_error(tmp_path: Path) -> None:
    for url in ("postgresql://postgres@127.0.0.1:1/nothing",
                f"sqlite:///{tmp_path}/missing/dir/jobs.db"):
        app = Conveyor(url)

        @app.task
        def noop() -> None: ...

        with pytest.raises(DatabaseUnavailableError) as info:
            noop.enqueue()
        assert "\n" not in str(info.value)
        app.close()
    with pytest.raises(ValueError, match="unsupported database URL"):
        Conveyor("mysql://localhost/x")
    with pytest.raises(ValueError, match="bad SQLite URL"):
        Conveyor("sqlite://")
