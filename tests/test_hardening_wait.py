"""Issue 28, defects 2 and 3: every ``Job`` the public API returns can be waited on,
and a wait that times out names the jobs it waited for, in a process that then exits
cleanly. Both backends."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

import conveyor
from conveyor import (
    Batch,
    Conveyor,
    Job,
    JobState,
    Task,
    WaitTimeoutError,
    WorkerConfig,
    WorkflowRun,
    chain,
    group,
)

from ._runtime_util import burst

T = TypeVar("T")

SRC = Path(conveyor.__file__).resolve().parents[1]


Add = Task[[int, int], int]
#: Each public path that returns Jobs: (app, the task, a job already enqueued) -> jobs.
SYNC_PATHS: dict[str, Callable[[Conveyor, Add, Job], list[Job]]] = {
    "enqueue": lambda app, add, first: [add.enqueue(1, 2)],
    "options.enqueue": lambda app, add, first: [add.options(priority=1).enqueue(1, 4)],
    "options(depends_on).enqueue": lambda app, add, first: [
        add.options(depends_on=[first]).enqueue(1, 6)],
    "enqueue_many": lambda app, add, first: app.enqueue_many([add.job(1, 8), add.job(1, 9)]),
    "enqueue_many(depends_on)": lambda app, add, first: app.enqueue_many(
        [add.options(depends_on=[first]).job(1, 10)]),
    "enqueue_workflow": lambda app, add, first: app.enqueue_workflow(
        chain(add.job(1, 11), group(add.job(1, 12), add.job(1, 13)))).jobs,
    "get_workflow": lambda app, add, first: _some(app.get_workflow(
        app.enqueue_workflow(chain(add.job(1, 18), add.job(1, 19))).id)).jobs,
    "batch": lambda app, add, first: app.batch(
        [add.job(1, 14)], on_complete=add.job(1, 15)).jobs,
    "batch_add": lambda app, add, first: _added(app, add),
    "get_job": lambda app, add, first: [_some(app.get_job(first.id))],
    "list_jobs": lambda app, add, first: app.list_jobs(limit=3),
    "retry_job": lambda app, add, first: [app.retry_job(
        app.cancel_job(add.options(delay=3600).enqueue(1, 20).id).id)],
}
ASYNC_PATHS: dict[str, Callable[[Conveyor, Add, Job], Awaitable[list[Job]]]] = {
    "enqueue_async": lambda app, add, first: _listed(add.enqueue_async(1, 3)),
    "options.enqueue_async": lambda app, add, first: _listed(
        add.options(priority=1).enqueue_async(1, 5)),
    "options(depends_on).enqueue_async": lambda app, add, first: _listed(
        add.options(depends_on=[first.id]).enqueue_async(1, 7)),
    "enqueue_many_async(depends_on)": lambda app, add, first: app.enqueue_many_async(
        [add.options(depends_on=[first]).job(2, 4)]),
    "enqueue_workflow_async": lambda app, add, first: _jobs_of(app.enqueue_workflow_async(
        chain(add.job(2, 5), add.job(2, 6)))),
    "batch_async": lambda app, add, first: _jobs_of(app.batch_async([add.job(2, 7)])),
    "get_job_async": lambda app, add, first: _listed(app.get_job_async(first.id)),
    "list_jobs_async": lambda app, add, first: app.list_jobs_async(limit=2),
}


def _some(value: T | None) -> T:
    assert value is not None
    return value


def _added(app: Conveyor, add: Add) -> list[Job]:
    batch = app.batch([add.job(1, 16)], open=True)
    added = app.batch_add(batch.id, [add.job(1, 17)])
    app.batch_close(batch.id)
    return added


async def _listed(pending: Awaitable[Job | None]) -> list[Job]:
    return [_some(await pending)]


async def _jobs_of(pending: Awaitable[WorkflowRun | Batch]) -> list[Job]:
    return (await pending).jobs


def _adder(app: Conveyor) -> tuple[Add, Job]:
    @app.task(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    return add, add.enqueue(1, 1)


@pytest.mark.parametrize("path", list(SYNC_PATHS))
def test_a_job_the_sync_api_returns_can_be_waited_on(app: Conveyor, path: str) -> None:
    """``options(depends_on=...).enqueue(...)`` returned a Job whose ``wait`` raised
    "job 3 was not read through an app"; so did workflows' and batches' jobs."""
    add, first = _adder(app)
    jobs = SYNC_PATHS[path](app, add, first)
    assert jobs
    burst(app)
    for job in jobs:
        done = job.wait(timeout=10)
        assert done.state is JobState.COMPLETED, done
        assert done.result == job.args[0] + job.args[1], done


@pytest.mark.parametrize("path", list(ASYNC_PATHS))
def test_a_job_the_async_api_returns_can_be_waited_on(app: Conveyor, path: str) -> None:
    add, first = _adder(app)

    async def main() -> None:
        try:
            jobs = await ASYNC_PATHS[path](app, add, first)
            assert jobs
            worker = asyncio.create_task(app.run_worker(config=WorkerConfig(burst=True)))
            for job in jobs:
                done = await job.wait_async(timeout=30)
                assert done.result == job.args[0] + job.args[1], done
            await asyncio.wait_for(worker, 60)
        finally:
            await app.close_async()

    asyncio.run(main())


# -- defect 3: a wait that times out ---------------------------------------------------------


def test_a_wait_that_times_out_names_the_unfinished_jobs(app: Conveyor) -> None:
    @app.task(name="never_run")
    def never_run() -> None: ...

    done_id = app.enqueue_many([never_run.job()])[0].id
    app.cancel_job(done_id)
    waiting = [never_run.enqueue() for _ in range(2)]
    with pytest.raises(WaitTimeoutError) as caught:
        app.wait_jobs([done_id, *waiting], timeout=0.1)
    message = str(caught.value)
    assert f"2 job(s) not finished after 0.1s: [{waiting[0].id}, {waiting[1].id}]" in message
    with pytest.raises(WaitTimeoutError, match=rf"\[{waiting[0].id}\]"):
        waiting[0].wait(timeout=0.05)
    assert caught.value.job_ids == [waiting[0].id, waiting[1].id]


def test_a_process_that_timed_out_waiting_exits_cleanly(db_url: str, tmp_path: Path) -> None:
    """No "Task was destroyed but it is pending!" at exit (the waiter's reading task
    was left pending on the sync API's loop), on either backend."""
    script = tmp_path / "timed_out.py"
    script.write_text(textwrap.dedent(f"""
        from conveyor import Conveyor, WaitTimeoutError

        app = Conveyor({db_url!r})

        @app.task
        def slow() -> None: ...

        job = slow.enqueue()
        try:
            job.wait(timeout=0.2)
        except WaitTimeoutError as exc:
            print("timed out:", exc)
    """))
    env = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONDEVMODE": "1"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "timed out: 1 job(s) not finished" in done.stdout, done.stdout
    assert "destroyed" not in done.stderr and "pending" not in done.stderr, done.stderr
    assert done.stderr.strip() == "", done.stderr
