"""Issue 28, defect 12: a key function (``RateLimit(key=)``, ``Unique(key=)``,
``concurrency_key=``) that cannot take every call of its task is refused when the task
is defined, not found job by job (a rate limit fell back to the task-wide key with a
log line); the documented rate-limit key works for a task of several arguments."""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, JobState, RateLimit, Unique, WorkerConfig

DOC = Path(__file__).resolve().parents[1] / "docs" / "flow-control.md"


def test_the_old_documented_key_is_refused_for_a_task_of_two_arguments() -> None:
    app = Conveyor("sqlite:///:memory:")
    with pytest.raises(TypeError, match=r"RateLimit\(key=\.\.\.\).*'send'.*key\(to, subject\) "
                                        r"fails \(too many positional arguments\)"):
        @app.task(rate_limit=RateLimit("10/s", key=lambda to, **_: to.split("@")[1]))
        def send(to: str, subject: str) -> None: ...
    assert "send" not in app.tasks


@pytest.mark.parametrize(("options", "fn", "named"), [
    ({"unique": Unique(key=lambda a: a)}, lambda a, b=1: None, r"Unique.*key\(a, b\) fails"),
    ({"concurrency_key": lambda user: user}, lambda user, *, n: None,
     r"concurrency_key=.*key\(user, n=\.\.\.\) fails"),
    ({"rate_limit": RateLimit("1/s", key=lambda a: a)}, lambda a, *more: None,
     r"key\(a, \*args\) fails"),
    ({"rate_limit": RateLimit("1/s", key=lambda *, a: a)}, lambda a: None,
     r"key\(a\) fails"),
    ({"concurrency_key": lambda a: a}, lambda a, **options: None,
     r"key\(a, more_kwargs=\.\.\.\) fails"),
])
def test_every_call_shape_is_checked(options: dict[str, Any], fn: Any, named: str) -> None:
    app = Conveyor("sqlite:///:memory:")
    with pytest.raises(TypeError, match=named):
        app.task(name="t", **options)(fn)


def test_a_key_sees_the_same_call_however_the_caller_passed_the_arguments() -> None:
    """Arguments are bound to the task's parameters before a key function sees them:
    ``lambda user, *_: user`` keys a job enqueued by name as one enqueued by position."""
    app = Conveyor("sqlite:///:memory:")

    @app.task(name="per_user", concurrency=1, concurrency_key=lambda user, *_: user,
              unique=Unique(key=lambda user, seconds=0: f"{user}/{seconds}"))
    def per_user(user: str, seconds: float = 0) -> None: ...

    by_position = per_user.job("ada", 2).concurrency_key()
    by_name = per_user.job(seconds=2, user="ada").concurrency_key()
    assert by_position == by_name == "per_user:ada"
    first = per_user.job("ada").to_insert(1 << 20)
    again = per_user.job(user="ada", seconds=0).to_insert(1 << 20)
    assert first.unique_key == again.unique_key == "per_user:ada/0"


@pytest.mark.parametrize("key", [
    lambda to, *_, **__: to,
    lambda to, subject, body="": to,
    lambda *args, **kwargs: args[0] if args else kwargs["to"],
    "a fixed key",
])
def test_key_functions_that_take_every_call_are_accepted(key: Any) -> None:
    app = Conveyor("sqlite:///:memory:")
    unique = Unique(key=key)
    options: dict[str, Any] = {"unique": unique}
    if callable(key):
        options.update(rate_limit=RateLimit("1/s", key=key), concurrency_key=key)

    @app.task(name="send", **options)
    def send(to: str, subject: str, body: str = "") -> None: ...

    assert "send" in app.tasks


def test_the_documented_rate_limit_key_runs_on_a_task_of_several_arguments(
        app: Conveyor, caplog: pytest.LogCaptureFixture) -> None:
    """The docs' code block, run as it stands: both calls get their domain's key (no
    fallback to the task-wide key, which only a log line said)."""
    section = DOC.read_text().split("## Rate limits", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert block is not None
    namespace: dict[str, Any] = {"app": app, "RateLimit": RateLimit}
    exec(block.group(1), namespace)
    send = namespace["send"]
    jobs = [send.enqueue("a@b.example", "hi"), send.enqueue(to="c@d.example", subject="yo")]

    async def run() -> None:
        # not a burst worker: the queue's 50/s may put the second job off a few ms, and
        # a burst worker may stop before it is due
        stop = asyncio.Event()
        worker = asyncio.create_task(app.run_worker(
            {"mail": 2}, config=WorkerConfig(stage_interval=0.05), stop=stop))
        try:
            await app.wait_jobs_async(jobs, timeout=60)
        finally:
            stop.set()
            await asyncio.wait_for(worker, 60)
            await app.close_async()

    with caplog.at_level(logging.WARNING, logger="conveyor"):
        asyncio.run(run())
    assert "rate limit key" not in caplog.text, caplog.text
    for job in jobs:
        done = app.get_job(job.id)
        assert done is not None and done.state is JobState.COMPLETED, done
