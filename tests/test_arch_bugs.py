"""Bugs found during the re-architecture (issue 10), each pinned on both backends."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import conveyor
from conveyor import Conveyor, JobState, WorkerConfig

#: The source tree of the conveyor under test, for the subprocess.
SRC = Path(conveyor.__file__).resolve().parents[1]


def test_a_worker_and_an_enqueue_may_open_the_storage_at_once(app: Conveyor) -> None:
    """The first use on a loop opens the storage once; concurrent callers wait for it
    (it used to be published before it was open: 'storage is not open')."""

    @app.task
    async def step(i: int) -> int:
        return i

    async def main() -> None:
        worker = asyncio.create_task(
            app.run_worker(config=WorkerConfig(queues={"default": 10}, burst=True)))
        job = await step.enqueue_async(1)
        await asyncio.wait_for(worker, 20)
        done = await app.get_job_async(job.id)
        assert done is not None and done.state == JobState.COMPLETED
        await app.close_async()

    asyncio.run(main())


def test_a_script_that_never_closes_exits_silently(db_url: str, tmp_path: Path) -> None:
    """A plain script using the sync API exits promptly, with nothing on stderr (it
    printed 'Task was destroyed but it is pending!' on PostgreSQL) and nothing lost."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(f"""
        from conveyor import Conveyor

        app = Conveyor({db_url!r})

        @app.task
        def hello(i: int) -> None: ...

        for i in range(3):
            hello.enqueue(i)
        app.enqueue_many([hello.job(i) for i in range(3, 10)])
        print(app.count_jobs()["available"])
    """))
    env = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONDEVMODE": "1"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=30, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert time.monotonic() - started < 20
    assert done.stdout.split() == ["10"]
    check = Conveyor(db_url)
    try:
        assert check.count_jobs()["available"] == 10
    finally:
        check.close()


def test_enqueue_many_takes_more_than_one_batch(app: Conveyor) -> None:
    """25,000 jobs in one call: written in batches of max_batch (each one transaction)."""

    @app.task
    def noop(i: int) -> None: ...

    jobs = app.enqueue_many([noop.job(i) for i in range(25_000)])
    assert len(jobs) == 25_000 and len({j.id for j in jobs}) == 25_000
    assert [j.args for j in jobs[9_999:10_001]] == [[9_999], [10_000]]
    assert app.count_jobs()["available"] == 25_000

    async def more() -> int:
        return len(await app.enqueue_many_async([noop.job(i) for i in range(10_001)]))

    assert app._sync(more()) == 10_001


class _Counting:
    """A storage that counts the calls made through it."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls = inner, 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return attr(*args, **kwargs)

        return counted


def test_list_queues_counts_every_queue_in_a_fixed_number_of_queries(app: Conveyor) -> None:
    @app.task
    def noop() -> None: ...

    def calls_for(queues: int) -> tuple[int, dict[str, dict[str, int]]]:
        for q in range(queues):
            app.pause_queue(f"q{q}")
        counting: dict[str, _Counting] = {}

        async def run() -> list[Any]:
            counting["s"] = _Counting(await app.storage())
            original = app.storage

            async def counted() -> Any:
                return counting["s"]

            app.storage = counted  # type: ignore[method-assign]
            try:
                return await app.list_queues_async()
            finally:
                app.storage = original  # type: ignore[method-assign]

        infos = app._sync(run())
        return counting["s"].calls, {q.name: q.counts for q in infos}

    jobs = app.enqueue_many([noop.options(queue="q0").job() for _ in range(3)]
                            + [noop.options(queue="q1", delay=3600).job() for _ in range(3)])
    app.cancel_job(jobs[-1].id)
    few, counts = calls_for(2)
    assert counts["q0"]["available"] == 3 and counts["q1"]["scheduled"] == 2
    assert counts["q1"]["cancelled"] == 1 and counts["q0"]["cancelled"] == 0  # exact, per queue
    assert counts["q1"].get("available", 0) == 0 and counts["q0"].get("running", 0) == 0
    many, counts = calls_for(30)
    assert many == few, f"{few} storage calls for 2 queues, {many} for 30"
    assert len(counts) == 30 and counts["q0"]["available"] == 3
