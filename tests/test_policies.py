"""Retry policies (retry_on, discard_on, a backoff that sees the exception), per-queue
backoff and retention set live, worker labels and the app's version. Every test runs
on SQLite and PostgreSQL (the ``app`` fixture) with a real in-process worker."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import warnings
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import pytest

from conveyor import Conveyor, Job, JobState, WorkerConfig
from conveyor._storage import NodeUpsertParams

from ._runtime_util import FAST, aio, in_state, run_worker_until

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from conveyor.web import create_app


def config(*queues: str, **changes: Any) -> WorkerConfig:
    return dataclasses.replace(FAST, queues={q: 5 for q in queues or ("default",)},
                               settings_interval=0.05, **changes)


async def run_until(app: Conveyor, job: Job, *states: JobState, cfg: WorkerConfig | None = None,
                    ) -> Job:
    await run_worker_until(app, in_state(app, job, *states), cfg or config(job.queue))
    found = await app.get_job_async(job.id)
    assert found is not None
    return found


def delay_of(job: Job) -> float:
    """Seconds from the failed attempt's end to the next attempt."""
    assert job.scheduled_at is not None and job.errors
    failed_at = datetime.fromisoformat(job.errors[-1]["at"])
    return (job.scheduled_at - failed_at).total_seconds()


# -- retry_on / discard_on ---------------------------------------------------------------------


@aio
async def test_discard_on_discards_at_once_and_says_why(app: Conveyor) -> None:
    @app.task(max_attempts=5, backoff=3600, discard_on=(ValueError,))
    async def parse(text: str) -> None:
        if text == "bad":
            raise ValueError("not a number: bad")
        raise KeyError(text)

    bad = await run_until(app, await parse.enqueue_async("bad"), JobState.DISCARDED,
                          JobState.RETRYABLE)
    assert bad.state is JobState.DISCARDED and bad.attempt == 1
    error = bad.errors[-1]["error"]
    assert error.startswith("discard_on matched ValueError")
    assert "ValueError: not a number: bad" in error
    other = await run_until(app, await parse.enqueue_async("x"), JobState.DISCARDED,
                            JobState.RETRYABLE)
    assert other.state is JobState.RETRYABLE  # not in discard_on: retries as before


@aio
async def test_retry_on_retries_only_those_types(app: Conveyor) -> None:
    calls: list[int] = []

    @app.task(max_attempts=5, backoff=0, retry_on=(ConnectionError, TimeoutError))
    async def fetch() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionRefusedError("refused")  # a subclass of ConnectionError
        raise ValueError("bad reply")

    job = await run_until(app, await fetch.enqueue_async(), JobState.DISCARDED,
                          JobState.COMPLETED)
    assert job.state is JobState.DISCARDED and job.attempt == 2, job.errors
    assert job.errors[0]["error"] == "ConnectionRefusedError: refused"
    assert job.errors[-1]["error"].startswith(
        "ValueError is not in retry_on (ConnectionError, TimeoutError)")


@aio
async def test_discard_on_wins_over_retry_on_and_names_the_matching_base(app: Conveyor) -> None:
    @app.task(max_attempts=5, backoff=0, retry_on=(OSError,), discard_on=(OSError,))
    async def both() -> None:
        raise FileNotFoundError("gone")

    job = await run_until(app, await both.enqueue_async(), JobState.DISCARDED)
    assert job.attempt == 1
    assert job.errors[-1]["error"].startswith("discard_on matched FileNotFoundError (as OSError)")


@aio
async def test_a_task_timeout_counts_as_timeout_error(app: Conveyor) -> None:
    @app.task(max_attempts=5, backoff=3600, timeout=0.05, discard_on=TimeoutError)
    async def slow() -> None:
        await asyncio.sleep(10)

    job = await run_until(app, await slow.enqueue_async(), JobState.DISCARDED, JobState.RETRYABLE)
    assert job.state is JobState.DISCARDED
    assert job.errors[-1]["error"].startswith("discard_on matched TimeoutError")


@aio
async def test_backoff_may_look_at_the_exception(app: Conveyor) -> None:
    seen: list[tuple[int, str]] = []

    def backoff(attempt: int, exc: BaseException) -> float:
        seen.append((attempt, type(exc).__name__))
        return 1000.0 if isinstance(exc, ConnectionError) else 2000.0

    @app.task(backoff=backoff)
    async def call(kind: str) -> None:
        raise ConnectionError("down") if kind == "conn" else RuntimeError("bug")

    conn = await run_until(app, await call.enqueue_async("conn"), JobState.RETRYABLE)
    other = await run_until(app, await call.enqueue_async("other"), JobState.RETRYABLE)
    assert delay_of(conn) == pytest.approx(1000, abs=2)
    assert delay_of(other) == pytest.approx(2000, abs=2)
    assert seen == [(1, "ConnectionError"), (1, "RuntimeError")]


@aio
async def test_todays_backoff_forms_still_work(app: Conveyor) -> None:
    @app.task(backoff=lambda attempt: 500.0 * attempt)
    async def by_attempt() -> None:
        raise RuntimeError("x")

    @app.task(backoff=700)
    async def fixed() -> None:
        raise RuntimeError("x")

    @app.task(backoff=lambda attempt, exc=None: 900.0)  # a defaulted 2nd parameter gets exc
    async def with_default() -> None:
        raise RuntimeError("x")

    for task, expected in ((by_attempt, 500), (fixed, 700), (with_default, 900)):
        job = await run_until(app, await task.enqueue_async(), JobState.RETRYABLE)
        assert delay_of(job) == pytest.approx(expected, abs=2), task.name


@aio
async def test_a_backoff_that_raises_falls_back_and_loses_nothing(app: Conveyor) -> None:
    @app.task(backoff=lambda attempt, exc: 1 / 0)
    async def broken() -> None:
        raise RuntimeError("x")

    job = await run_until(app, await broken.enqueue_async(), JobState.RETRYABLE)
    assert 10 < delay_of(job) < 20  # the built-in backoff of attempt 1 (about 16 s)


@pytest.mark.parametrize(("options", "error", "text"), [
    ({"retry_on": "ValueError"}, TypeError, "retry_on= takes exception classes"),
    ({"retry_on": (ValueError, 3)}, TypeError, "got 3 (int)"),
    ({"discard_on": (int,)}, TypeError, "discard_on= takes exception classes"),
    ({"discard_on": ValueError("x")}, TypeError, "discard_on= takes exception classes"),
    ({"backoff": "5"}, ValueError, "backoff= must be seconds >= 0 or a callable"),
    ({"backoff": -1}, ValueError, "backoff= must be seconds"),
    ({"backoff": True}, ValueError, "backoff= must be seconds"),
    ({"backoff": lambda: 1.0}, TypeError, "callable(attempt, exc)"),
    ({"backoff": lambda a, b, c: 1.0}, TypeError, "callable(attempt, exc)"),
])
def test_bad_policies_are_refused_when_the_task_is_defined(
        app: Conveyor, options: dict[str, Any], error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=text.replace("(", r"\(").replace(")", r"\)")):
        app.task(**options)(lambda: None)
    assert not app.tasks


# -- per-queue backoff -------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["", "soon", "exp", "exp:0", "exp:10:5", "lin:5", "-3",
                                  "nan", "inf", "exp:5:1e12", True, [5]])
def test_bad_queue_backoffs_are_refused(app: Conveyor, spec: Any) -> None:
    with pytest.raises(ValueError, match="a queue backoff is seconds"):
        app.set_queue_backoff("mail", spec)
    assert all(q.backoff is None for q in app.list_queues())


def test_queue_backoff_and_retention_are_stored_and_reset(app: Conveyor) -> None:
    app.set_queue_backoff("mail", "EXP:5:3600")
    app.set_queue_retention("mail", completed=60)
    app.set_queue_concurrency("mail", 3)  # other settings leave these alone
    (mail,) = app.list_queues()
    assert (mail.backoff, mail.completed_retention, mail.discarded_retention) == (
        "exp:5:3600", 60.0, None)
    app.set_queue_retention("mail", discarded=0)
    app.set_queue_backoff("mail", 30)
    (mail,) = app.list_queues()
    assert (mail.backoff, mail.completed_retention, mail.discarded_retention,
            mail.concurrency) == ("30", 60.0, 0.0, 3)
    app.set_queue_backoff("mail", None)
    app.set_queue_retention("mail", completed=None, discarded=None)
    (mail,) = app.list_queues()
    assert (mail.backoff, mail.completed_retention, mail.discarded_retention) == (
        None, None, None)
    for bad in ({"completed": -1}, {"discarded": "1h"}, {"completed": True}, {}):
        with pytest.raises(ValueError, match=r"retention|completed="):
            app.set_queue_retention("mail", **bad)
    with pytest.raises(ValueError):
        app.set_queue_backoff("bad queue name!" * 20, 5)


@aio
async def test_a_running_worker_picks_up_the_queue_backoff_and_a_task_backoff_wins(
        app: Conveyor) -> None:
    @app.task(queue="mail")
    async def send() -> None:
        raise ConnectionError("smtp down")

    @app.task(queue="mail", backoff=7)
    async def send_own() -> None:
        raise ConnectionError("smtp down")

    first = await send.enqueue_async()
    delays: dict[str, float] = {}

    async def during(worker: Any) -> None:
        await wait(in_state(app, first, JobState.RETRYABLE))
        delays["builtin"] = delay_of(await app.get_job_async(first.id))  # type: ignore[arg-type]
        await app.set_queue_backoff_async("mail", "exp:300:4000")
        await wait_sync(lambda: "mail" in worker.executor.queue_backoffs)
        for name, task in (("queue", send), ("own", send_own)):
            job = await task.enqueue_async()
            await wait(in_state(app, job, JobState.RETRYABLE))
            delays[name] = delay_of(await app.get_job_async(job.id))  # type: ignore[arg-type]
        await app.set_queue_backoff_async("mail", None)
        await wait_sync(lambda: "mail" not in worker.executor.queue_backoffs)

    await run_worker_until(app, _true, config("mail"), during=during)
    assert 10 < delays["builtin"] < 20
    assert 270 <= delays["queue"] <= 330  # exp:300 at attempt 1, with ±10% jitter
    assert delays["own"] == pytest.approx(7, abs=1)


async def _true() -> bool:
    return True


async def wait(check: Callable[[], Awaitable[bool]], timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def wait_sync(check: Callable[[], bool], timeout: float = 20) -> None:
    async def wrapped() -> bool:
        return check()
    await wait(wrapped, timeout)


# -- per-queue retention -----------------------------------------------------------------------


@aio
async def test_the_pruner_uses_each_queues_retention(app: Conveyor) -> None:
    @app.task(queue="short", max_attempts=1)
    async def short(fail: bool) -> None:
        if fail:
            raise RuntimeError("x")

    @app.task(queue="long", max_attempts=1)
    async def long(fail: bool) -> None:
        if fail:
            raise RuntimeError("x")

    await app.set_queue_retention_async("short", completed=0)
    jobs = {(t.name, f): await t.enqueue_async(f) for t in (short, long) for f in (False, True)}

    async def pruned() -> bool:
        return await app.get_job_async(jobs["short", False].id) is None

    cfg = config("short", "long", prune_interval=0.05, leader_ttl=2.0, cron_interval=0.05)
    await run_worker_until(app, pruned, cfg)
    states = {key: (await app.get_job_async(j.id)) for key, j in jobs.items()}
    assert states["short", False] is None  # completed: short keeps them 0 s
    assert states["short", True] is not None  # discarded: the workers' 7 days
    assert states["long", False] is not None and states["long", True] is not None
    await app.set_queue_retention_async("short", completed=None, discarded=0)
    await run_worker_until(app, _gone(app, jobs["short", True]), cfg)
    assert await app.get_job_async(jobs["long", True].id) is not None


def _gone(app: Conveyor, job: Job) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await app.get_job_async(job.id) is None
    return check


# -- labels and version ------------------------------------------------------------------------


@aio
async def test_labels_and_version_reach_nodes_and_explain(db_url: str) -> None:
    app = Conveyor(db_url, version="2026.11.26-abc123")
    release = asyncio.Event()

    @app.task
    async def hold() -> None:
        await release.wait()

    try:
        job = await hold.enqueue_async()
        seen: dict[str, Any] = {}

        async def during(worker: Any) -> None:
            await wait(in_state(app, job, JobState.RUNNING))
            (node,) = await app.list_nodes_async()
            seen["node"] = node
            seen["explain"] = str(await app.explain_job_async(job.id))
            release.set()

        cfg = config(labels={"region": "eu-west", "tier": "gold"})
        await run_worker_until(app, in_state(app, job, JobState.COMPLETED), cfg, during=during)
        assert seen["node"].labels == {"region": "eu-west", "tier": "gold"}
        assert seen["node"].version == "2026.11.26-abc123"
        assert "app version 2026.11.26-abc123, labels region=eu-west, tier=gold" in seen["explain"]
    finally:
        await app.close_async()


def test_labels_and_version_from_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Any) -> None:
    monkeypatch.setenv("CONVEYOR_WORKER_LABELS", "region=eu, tier=gold")
    monkeypatch.setenv("CONVEYOR_APP_VERSION", "v9")
    assert WorkerConfig().labels == {"region": "eu", "tier": "gold"}
    assert WorkerConfig(labels={"x": "1"}).labels == {"x": "1"}
    url = f"sqlite:///{tmp_path / 'v.db'}"
    assert Conveyor(url).config.version == "v9"
    assert Conveyor(url, version="v10").config.version == "v10"
    for bad in ("region", "=eu", "bad key=1"):
        monkeypatch.setenv("CONVEYOR_WORKER_LABELS", bad)
        with pytest.raises(ValueError, match=r"CONVEYOR_WORKER_LABELS|label key"):
            WorkerConfig()
    monkeypatch.delenv("CONVEYOR_WORKER_LABELS")
    with pytest.raises(ValueError, match="label"):
        WorkerConfig(labels={"k": 3})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="version"):
        Conveyor(url, version="")


# -- the dashboard -----------------------------------------------------------------------------


@aio
async def test_dashboard_shows_queue_policies_and_worker_labels(app: Conveyor) -> None:
    await app.set_queue_backoff_async("mail", "exp:5:3600")
    await app.set_queue_retention_async("mail", completed=3600)
    storage = await app.storage()
    await storage.node_upsert(NodeUpsertParams(
        id="node-labelled", hostname="h1", pid=1, queues_json='{"mail": 2}',
        labels_json=json.dumps({"region": "eu"}), version="v42", ttl=60))

    def pages() -> tuple[str, str]:
        with TestClient(create_app(app), base_url="http://localhost") as client:
            return client.get("/queues").text, client.get("/workers").text

    queues, workers = await asyncio.to_thread(pages)
    row = queues[queues.index('data-queue="mail"'):]
    row = row[:row.index("</tr>")]
    assert "backoff <code>exp:5:3600</code>" in row and "keep done 1.0 h" in row
    node = workers[workers.index('data-node="node-labelled"'):]
    node = node[:node.index("</tr>")]
    assert "<code>v42</code>" in node and "region=eu" in node
