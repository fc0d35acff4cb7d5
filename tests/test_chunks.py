"""Chunk tasks on a real worker, on both backends: the handler takes many jobs at once,
and each job keeps its own result, attempts, retries and state."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from conveyor import Chunk, ChunkJob, ChunkResult, Conveyor, JobState, Snooze, StateChange

from ._runtime_util import FAST, all_final, run_worker_until

ONE_SLOT = dataclasses.replace(FAST, queues={"default": 1})


async def _jobs(app: Conveyor, task: str) -> list[Any]:
    return sorted(await app.list_jobs_async(task=task, limit=1000), key=lambda j: j.id)


def _balanced(worker: Any) -> None:
    """Every count the chunker keeps came back to zero once the worker stopped."""
    assert worker.chunker is not None and worker.chunker.held == 0
    assert all(p.running == 0 and p.room == 0 for p in worker.producers.values())
    assert not worker._executions


def test_results_per_job_in_full_chunks(app: Conveyor) -> None:
    """25 waiting jobs on a queue of one slot: chunks of 10, 10 and 5, each job
    completes with its own result; the last chunk runs after ``wait``, not full."""
    sizes: list[int] = []

    @app.task(chunk=Chunk(size=10, wait=0.3))
    async def double(jobs: list[ChunkJob]) -> list[int]:
        sizes.append(len(jobs))
        assert all(isinstance(j, ChunkJob) and j.attempt == 1 for j in jobs)
        return [j.args[0] * 2 + j.kwargs.get("plus", 0) for j in jobs]

    async def main() -> None:
        jobs = await app.enqueue_many_async(
            [double.job(i, plus=100) if i == 3 else double.job(i) for i in range(25)])
        worker = await run_worker_until(app, all_final(app), config=ONE_SLOT)
        _balanced(worker)
        done = {j.id: j for j in await _jobs(app, "double")}
        for i, job in enumerate(jobs):
            got = done[job.id]
            assert got.state is JobState.COMPLETED and got.attempt == 1
            assert got.result == i * 2 + (100 if i == 3 else 0)
        assert sorted(sizes, reverse=True) == [10, 10, 5]
        await app.close_async()

    asyncio.run(main())


def test_sync_handler_and_a_short_chunk_after_wait(app: Conveyor) -> None:
    """A sync handler runs in a thread; 3 jobs with size 50 run as one chunk of 3 once
    ``wait`` is over."""
    calls: list[tuple[int, bool]] = []

    @app.task(chunk=Chunk(size=50, wait=0.5))
    def upper(jobs: list[ChunkJob]) -> list[str]:
        calls.append((len(jobs), threading.current_thread() is threading.main_thread()))
        return [str(j.args[0]).upper() for j in jobs]

    async def main() -> None:
        await app.enqueue_many_async([upper.job(w) for w in ("a", "b", "c")])
        started = time.monotonic()
        await run_worker_until(app, all_final(app))
        assert time.monotonic() - started >= 0.4  # it waited for more to come
        assert calls == [(3, False)]
        assert sorted(j.result for j in await _jobs(app, "upper")) == ["A", "B", "C"]
        await app.close_async()

    asyncio.run(main())


def test_raise_fails_every_job_each_with_its_own_attempts(app: Conveyor) -> None:
    """Raising fails the chunk's jobs; each retries by its own policy and counts its
    own attempts (here 2, then discarded), with its own error entries."""
    calls: list[list[int]] = []

    @app.task(chunk=Chunk(size=5, wait=0.2), max_attempts=2, backoff=0)
    async def broken(jobs: list[ChunkJob]) -> list[None]:
        calls.append(sorted(j.attempt for j in jobs))
        raise ConnectionError("upstream down")

    async def main() -> None:
        await app.enqueue_many_async([broken.job(i) for i in range(5)])
        await run_worker_until(app, all_final(app))
        jobs = await _jobs(app, "broken")
        assert [j.state for j in jobs] == [JobState.DISCARDED] * 5
        assert all(j.attempt == 2 and len(j.errors) == 2 for j in jobs)
        assert all("ConnectionError: upstream down" in j.errors[-1]["error"] for j in jobs)
        assert sum(len(c) for c in calls) == 10 and all(set(c) <= {1, 2} for c in calls)
        await app.close_async()

    asyncio.run(main())


def test_chunk_result_fails_some(app: Conveyor) -> None:
    """``ChunkResult(failed=...)``: those jobs fail (and retry) alone; the others complete
    with their results; a Snooze in it snoozes that job without using an attempt."""

    snoozed: set[int] = set()

    @app.task(chunk=Chunk(size=10, wait=0.2), max_attempts=3, backoff=0)
    async def parse(jobs: list[ChunkJob]) -> ChunkResult:
        failed: dict[int, BaseException] = {}
        results: dict[int, Any] = {}
        for j in jobs:
            if j.args[0] == "bad":
                failed[j.id] = ValueError(f"cannot parse {j.args[0]!r}")
            elif j.args[0] == "later" and j.id not in snoozed:
                snoozed.add(j.id)
                failed[j.id] = Snooze(0)
            else:
                results[j.id] = len(j.args[0])
        return ChunkResult(failed=failed, results=results)

    async def main() -> None:
        await app.enqueue_many_async([parse.job(w) for w in ("ok", "bad", "fine", "later")])
        await run_worker_until(app, all_final(app))
        by_arg = {j.args[0]: j for j in await _jobs(app, "parse")}
        assert by_arg["ok"].state is JobState.COMPLETED and by_arg["ok"].result == 2
        assert by_arg["fine"].result == 4 and by_arg["fine"].attempt == 1
        bad = by_arg["bad"]
        assert bad.state is JobState.DISCARDED and bad.attempt == 3
        assert all("ValueError: cannot parse 'bad'" in e["error"] for e in bad.errors)
        later = by_arg["later"]
        assert later.state is JobState.COMPLETED and later.result == 5 and later.attempt == 1
        await app.close_async()

    asyncio.run(main())


@pytest.mark.parametrize("returned", ["short", "not a list", "unknown id"])
def test_a_wrong_result_fails_the_jobs_with_a_clear_error(app: Conveyor, returned: str) -> None:
    @app.task(chunk=Chunk(size=4, wait=0.2), max_attempts=1)
    async def sloppy(jobs: list[ChunkJob]) -> Any:
        if returned == "short":
            return [1] * (len(jobs) - 1)
        if returned == "unknown id":
            return ChunkResult(failed={-5: ValueError("x")})
        return {"a": 1}

    async def main() -> None:
        await app.enqueue_many_async([sloppy.job(i) for i in range(4)])
        await run_worker_until(app, all_final(app))
        jobs = await _jobs(app, "sloppy")
        assert len(jobs) == 4 and all(j.state is JobState.DISCARDED for j in jobs)
        want = {"short": "it must return a list of 4 results",
                "not a list": "returned dict; it must return a list of 4",
                "unknown id": "naming job(s) [-5] that are not in its chunk"}[returned]
        assert all(want in j.errors[-1]["error"] for j in jobs), jobs[0].errors
        await app.close_async()

    asyncio.run(main())


def test_bad_chunk_arguments_are_refused(app: Conveyor) -> None:
    bad: Any
    wait: Any
    for bad, kind in [(0, ValueError), (10_001, ValueError), (True, TypeError),
                      (2.5, TypeError), ("10", TypeError)]:
        with pytest.raises(kind, match="size"):
            Chunk(size=bad)
    for wait, kind in [(-1, ValueError), (float("nan"), ValueError), (301, ValueError),
                       ("1", TypeError), (None, TypeError)]:
        with pytest.raises(kind, match="wait"):
            Chunk(wait=wait)
    with pytest.raises(TypeError, match=r"takes a conveyor\.Chunk"):
        app.task(name="bad", chunk=10)(lambda jobs: jobs)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="must take one positional parameter"):
        @app.task(chunk=Chunk())
        def two(jobs: list[ChunkJob], other: int) -> list[int]:
            return []
    with pytest.raises(TypeError, match="must take one positional parameter"):
        @app.task(chunk=Chunk())
        def none() -> list[int]:
            return []
    with pytest.raises(TypeError, match="ChunkResult\\(failed=\\)"):
        ChunkResult(failed={1: "not an exception"})  # type: ignore[dict-item]
    assert "two" not in app.tasks and "none" not in app.tasks

    @app.task(chunk=Chunk(size=1, wait=0))
    def fine(jobs: list[ChunkJob], extra: int = 0, *rest: Any) -> list[int]:
        return [0] * len(jobs)

    fine.enqueue(1, 2, key="any JSON")  # a job's arguments are free: the list is the handler's


def test_plain_tasks_beside_a_chunk_task_on_one_queue(app: Conveyor) -> None:
    """A queue of one slot with plain and chunk jobs: every job runs, plain jobs never
    above the queue's limit (claims made for a chunk's room give them back)."""
    running = {"now": 0, "most": 0}

    @app.task
    async def plain(i: int) -> int:
        running["now"] += 1
        running["most"] = max(running["most"], running["now"])
        await asyncio.sleep(0.01)
        running["now"] -= 1
        return i

    @app.task(chunk=Chunk(size=20, wait=0.1))
    async def chunked(jobs: list[ChunkJob]) -> list[int]:
        return [j.args[0] for j in jobs]

    async def main() -> None:
        await app.enqueue_many_async(
            [plain.job(i) if i % 3 == 0 else chunked.job(i) for i in range(60)])
        _balanced(await run_worker_until(app, all_final(app), config=ONE_SLOT, timeout=60))
        counts = await app.count_jobs_async()
        assert counts["completed"] == 60
        assert running["most"] == 1
        assert all(j.attempt == 1 for j in await _jobs(app, "plain"))
        await app.close_async()

    asyncio.run(main())


def test_leases_are_heartbeated_and_a_cancel_ends_one_job(app: Conveyor) -> None:
    """A chunk that runs past the lease's ttl keeps its leases (heartbeated); a cancel
    of one job of the chunk cancels that job alone, the others complete."""
    gate = asyncio.Event()
    seen: list[list[int]] = []

    @app.task(chunk=Chunk(size=5, wait=0.2))
    async def long(jobs: list[ChunkJob]) -> list[int]:
        seen.append([j.id for j in jobs])
        await gate.wait()
        return [j.id for j in jobs]

    async def main() -> None:
        jobs = await app.enqueue_many_async([long.job(i) for i in range(5)])
        config = dataclasses.replace(FAST, lease_ttl=1.0, heartbeat_interval=0.1)

        async def during(worker: Any) -> None:
            while not seen:
                await asyncio.sleep(0.02)
            await asyncio.sleep(2.5)  # past the lease ttl: only heartbeats keep them
            await app.cancel_job_async(jobs[1].id)
            victim = await app.get_job_async(jobs[1].id)
            for _ in range(500):
                victim = await app.get_job_async(jobs[1].id)
                if victim is not None and victim.state is JobState.CANCELLED:
                    break
                await asyncio.sleep(0.02)
            gate.set()

        await run_worker_until(app, all_final(app), config=config, during=during, timeout=60)
        got = await _jobs(app, "long")
        assert [j.state for j in got] == [JobState.COMPLETED, JobState.CANCELLED,
                                          *[JobState.COMPLETED] * 3]
        assert all(j.attempt == 1 for j in got) and len(seen) == 1
        assert [j.result for j in got if j.state is JobState.COMPLETED] == [
            j.id for k, j in enumerate(jobs) if k != 1]
        await app.close_async()

    asyncio.run(main())


def test_explain_job_mentions_the_chunk(app: Conveyor) -> None:
    @app.task(chunk=Chunk(size=30, wait=2))
    def bulk(jobs: list[ChunkJob]) -> list[None]:
        return [None] * len(jobs)

    @app.task
    def single() -> None: ...

    job = bulk.enqueue(1)
    notes = app.explain_job(job.id).notes
    assert any("runs in chunks of up to 30 jobs, gathered for up to 2s" in n for n in notes)
    assert not any("chunk" in n for n in app.explain_job(single.enqueue().id).notes)
    app.close()


def test_shutdown_mid_chunk_gives_the_jobs_back_and_a_timeout_fails_them(
        app: Conveyor) -> None:
    """A chunk still running at the shutdown timeout: each job goes back to the queue
    without using an attempt. A chunk past its task's timeout: each job fails with it."""
    started = asyncio.Event()

    @app.task(chunk=Chunk(size=3, wait=0.1))
    async def stuck(jobs: list[ChunkJob]) -> list[None]:
        started.set()
        await asyncio.Event().wait()
        return [None] * len(jobs)

    @app.task(chunk=Chunk(size=3, wait=0.1), timeout=0.3, max_attempts=1)
    def slow(jobs: list[ChunkJob]) -> list[None]:
        time.sleep(1.0)
        return [None] * len(jobs)

    async def main() -> None:
        jobs = await app.enqueue_many_async([stuck.job(i) for i in range(3)])

        async def is_started() -> bool:
            return started.is_set()

        config = dataclasses.replace(FAST, shutdown_timeout=0.3)
        await run_worker_until(app, is_started, config=config)
        for job in jobs:
            got = await app.get_job_async(job.id)
            assert got is not None and got.state is JobState.AVAILABLE and got.attempt == 0
        for job in jobs:
            await app.cancel_job_async(job.id)
        await app.enqueue_many_async([slow.job(i) for i in range(3)])
        await run_worker_until(app, all_final(app))
        timed_out = await _jobs(app, "slow")
        assert [j.state for j in timed_out] == [JobState.DISCARDED] * 3
        assert all("timeout of 0.3s" in j.errors[-1]["error"] for j in timed_out)
        await app.close_async()

    asyncio.run(main())


def test_the_dashboard_shows_the_chunk_on_the_job_page(app: Conveyor) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    from conveyor.web import create_app

    @app.task(chunk=Chunk(size=25, wait=0.5))
    def many(jobs: list[ChunkJob]) -> list[None]:
        return [None] * len(jobs)

    @app.task
    def one() -> None: ...

    job, plain = many.enqueue("x"), one.enqueue()
    with TestClient(create_app(app), base_url="http://localhost") as client:
        page = client.get(f"/jobs/{job.id}").text
        assert 'id="job-chunk"' in page and "up to 25 jobs per handler call" in page
        assert 'id="job-chunk"' not in client.get(f"/jobs/{plain.id}").text


def test_a_waited_result_is_the_jobs_own_not_the_lists(app: Conveyor) -> None:
    """``wait_job`` types a result by the handler's return annotation; a chunk handler's
    annotation is of the whole list, so a job's result comes back as stored."""

    @app.task(chunk=Chunk(size=5, wait=0))
    def names(jobs: list[ChunkJob]) -> list[str]:
        return [f"name-{j.args[0]}" for j in jobs]

    job = names.enqueue(7)
    app.drain()
    assert app.wait_job(job.id, timeout=10).result == "name-7"


def test_two_chunk_tasks_and_plain_jobs_share_a_queue(app: Conveyor) -> None:
    """Two chunk tasks and a plain one, 300 jobs, interleaved, on a queue of 3 slots:
    each job completes once with its own result, no chunk above its size."""
    sizes: dict[str, list[int]] = {"a": [], "b": []}

    @app.task(chunk=Chunk(size=7, wait=0.05))
    async def a(jobs: list[ChunkJob]) -> list[int]:
        sizes["a"].append(len(jobs))
        await asyncio.sleep(0.01)
        return [j.args[0] for j in jobs]

    @app.task(chunk=Chunk(size=40, wait=0.05))
    def b(jobs: list[ChunkJob]) -> list[int]:
        sizes["b"].append(len(jobs))
        return [-j.args[0] for j in jobs]

    @app.task
    async def c(i: int) -> int:
        return i * 10

    async def main() -> None:
        tasks = [a, b, c]
        await app.enqueue_many_async([tasks[i % 3].job(i) for i in range(300)])
        config = dataclasses.replace(FAST, queues={"default": 3})
        _balanced(await run_worker_until(app, all_final(app), config=config, timeout=90))
        want: dict[str, Callable[[int], int]] = {
            "a": lambda i: i, "b": lambda i: -i, "c": lambda i: i * 10}
        for name, f in want.items():
            got = await _jobs(app, name)
            assert len(got) == 100
            assert all(j.state is JobState.COMPLETED and j.attempt == 1
                       and j.result == f(j.args[0]) for j in got)
        assert sum(sizes["a"]) == 100 and max(sizes["a"]) <= 7
        assert sum(sizes["b"]) == 100 and max(sizes["b"]) <= 40
        await app.close_async()

    asyncio.run(main())


def test_a_concurrency_limit_counts_jobs_not_chunks(app: Conveyor) -> None:
    sizes: list[int] = []

    @app.task(chunk=Chunk(size=50, wait=0.1), concurrency=4)
    async def capped(jobs: list[ChunkJob]) -> list[None]:
        sizes.append(len(jobs))
        return [None] * len(jobs)

    async def main() -> None:
        await app.enqueue_many_async([capped.job(i) for i in range(12)])
        await run_worker_until(app, all_final(app), timeout=60)
        assert sum(sizes) == 12 and max(sizes) <= 4
        assert all(j.attempt == 1 for j in await _jobs(app, "capped"))
        await app.close_async()

    asyncio.run(main())


def test_each_job_of_a_chunk_has_its_own_state_changes(app: Conveyor) -> None:
    changes: list[StateChange] = []
    app.on_state_change(changes.append)

    @app.task(chunk=Chunk(size=10, wait=0.1), max_attempts=1)
    async def mixed(jobs: list[ChunkJob]) -> ChunkResult:
        return ChunkResult(failed={j.id: KeyError(j.args[0]) for j in jobs if j.args[0] % 2},
                           results={j.id: j.args[0] for j in jobs})

    async def main() -> None:
        jobs = await app.enqueue_many_async([mixed.job(i) for i in range(6)])
        worker = await run_worker_until(app, all_final(app))
        ended = {c.job_id: c for c in changes if c.previous == JobState.RUNNING}
        assert sorted(ended) == sorted(j.id for j in jobs)
        for i, job in enumerate(jobs):
            c = ended[job.id]
            assert c.state == (JobState.DISCARDED if i % 2 else JobState.COMPLETED)
            assert c.source == "worker" and c.node == worker.node_id
            assert (c.error is not None and "KeyError" in c.error) == bool(i % 2)
        await app.close_async()

    asyncio.run(main())
