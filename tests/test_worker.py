"""Handler outcomes end to end through an in-process worker, on both backends."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any, cast

from conveyor import Cancel, Conveyor, Discard, JobState, Snooze, current_job
from conveyor._runtime import Worker
from conveyor._storage import JobInsert, Storage

from ._runtime_util import FAST, all_final, in_state, run_worker_until


def test_async_and_sync_handlers_complete_with_results(app: Conveyor) -> None:
    threads: set[str] = set()

    @app.task
    async def add(a: int, b: int) -> int:
        return a + b

    @app.task
    def shout(text: str, times: int = 1) -> dict[str, Any]:
        threads.add(threading.current_thread().name)
        return {"text": text.upper() * times}

    async def main() -> None:
        a = await add.enqueue_async(2, 3)
        s = await shout.enqueue_async("hi", times=2)
        await run_worker_until(app, all_final(app))
        done_a, done_s = await app.get_job_async(a.id), await app.get_job_async(s.id)
        assert done_a is not None and done_a.state == JobState.COMPLETED and done_a.result == 5
        assert done_s is not None and done_s.result == {"text": "HIHI"} and done_s.attempt == 1
        await app.close_async()

    asyncio.run(main())
    assert all(name.startswith("conveyor-job") for name in threads)


def test_failures_retry_with_backoff_then_discard(app: Conveyor) -> None:
    calls: list[float] = []

    @app.task(max_attempts=3, backoff=lambda attempt: 0.2 * attempt)
    async def always_fails() -> None:
        calls.append(time.monotonic())
        raise ValueError(f"attempt {current_job().attempt} failed")

    async def main() -> None:
        job = await always_fails.enqueue_async()
        await run_worker_until(app, in_state(app, job, JobState.DISCARDED))
        final = await app.get_job_async(job.id)
        assert final is not None and final.attempt == 3
        assert [e["attempt"] for e in final.errors] == [1, 2, 3]
        assert final.errors[-1]["error"] == "ValueError: attempt 3 failed"
        assert "Traceback" in final.errors[0]["traceback"]
        await app.close_async()

    asyncio.run(main())
    assert len(calls) == 3
    assert calls[1] - calls[0] >= 0.18 and calls[2] - calls[1] >= 0.38  # backoff honoured


def test_retry_then_success_keeps_the_error_history(app: Conveyor) -> None:
    @app.task(backoff=0)
    def flaky() -> str:
        if current_job().attempt < 3:
            raise RuntimeError("not yet")
        return "finally"

    async def main() -> None:
        job = await flaky.enqueue_async()
        await run_worker_until(app, in_state(app, job, JobState.COMPLETED))
        final = await app.get_job_async(job.id)
        assert final is not None and final.result == "finally" and final.attempt == 3
        assert len(final.errors) == 2
        await app.close_async()

    asyncio.run(main())


def test_snooze_reschedules_without_using_an_attempt(app: Conveyor) -> None:
    runs: list[int] = []

    @app.task(max_attempts=1)
    async def patient() -> str:
        runs.append(current_job().attempt)
        if len(runs) < 3:
            raise Snooze(0.05)
        return "ok"

    async def main() -> None:
        job = await patient.enqueue_async()
        await run_worker_until(app, in_state(app, job, JobState.COMPLETED))
        final = await app.get_job_async(job.id)
        assert final is not None and final.attempt == 1 and final.errors == []
        await app.close_async()

    asyncio.run(main())
    assert runs == [1, 1, 1]


def test_cancel_and_discard_signals_end_the_job(app: Conveyor) -> None:
    @app.task
    async def cancels() -> None:
        raise Cancel("no longer needed")

    @app.task(max_attempts=10)
    def discards() -> None:
        raise Discard("bad recipient")

    async def main() -> None:
        c, d = await cancels.enqueue_async(), await discards.enqueue_async()
        await run_worker_until(app, all_final(app))
        fc, fd = await app.get_job_async(c.id), await app.get_job_async(d.id)
        assert fc is not None and fc.state == JobState.CANCELLED and fc.attempt == 1
        assert "no longer needed" in fc.errors[0]["error"]
        assert fd is not None and fd.state == JobState.DISCARDED and fd.attempt == 1
        assert "bad recipient" in fd.errors[0]["error"]
        await app.close_async()

    asyncio.run(main())


def test_timeout_fails_the_attempt(app: Conveyor) -> None:
    cancelled = asyncio.Event()

    @app.task(timeout=0.2, max_attempts=1)
    async def slow() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def main() -> None:
        job = await slow.enqueue_async()
        await run_worker_until(app, in_state(app, job, JobState.DISCARDED))
        final = await app.get_job_async(job.id)
        assert final is not None and "timeout of 0.2s" in final.errors[0]["error"]
        assert cancelled.is_set()
        await app.close_async()

    asyncio.run(main())


def test_unknown_task_and_unfit_args_are_discarded_and_the_worker_goes_on(app: Conveyor) -> None:
    """With ``unknown_task_timeout=0`` a job of an unknown task is discarded at once (the
    default lets it wait for a worker that knows it: tests/test_fidelity_runtime.py)."""
    @app.task
    async def greet(name: str) -> str:
        return f"hello {name}"

    async def main() -> None:
        storage = await app.storage()
        base = JobInsert(task="greet", queue="default", args_json="[]", kwargs_json="{}",
                         priority=0, max_attempts=5, tags_json="[]", meta_json="{}")
        ghost, unfit, good = await storage.job_insert_many([
            dataclasses.replace(base, task="no_such_task"),
            dataclasses.replace(base, kwargs_json='{"nom": "x"}'),
            dataclasses.replace(base, args_json='["ada"]'),
        ])
        await run_worker_until(app, all_final(app),
                               dataclasses.replace(FAST, unknown_task_timeout=0))
        g, u, ok = [await app.get_job_async(j.id) for j in (ghost, unfit, good)]
        assert g is not None and g.state == JobState.DISCARDED and g.attempt == 1
        assert "unknown task 'no_such_task'" in g.errors[0]["error"]
        assert u is not None and u.state == JobState.DISCARDED
        assert "no longer fit" in u.errors[0]["error"]
        assert ok is not None and ok.state == JobState.COMPLETED and ok.result == "hello ada"
        await app.close_async()

    asyncio.run(main())


def test_cancel_reaches_running_async_and_sync_handlers(app: Conveyor) -> None:
    started = threading.Event()
    saw_flag = threading.Event()

    @app.task
    async def forever() -> None:
        started.set()
        await asyncio.sleep(60)

    @app.task
    def polls() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if current_job().cancelled:
                saw_flag.set()
                return
            time.sleep(0.01)

    async def main() -> None:
        a, s = await forever.enqueue_async(), await polls.enqueue_async()

        async def cancel_when_running(_: object) -> None:
            for job in (a, s):
                deadline = time.monotonic() + 10
                while not await in_state(app, job, JobState.RUNNING)():
                    assert time.monotonic() < deadline, "job never started"
                    await asyncio.sleep(0.01)
                running = await app.cancel_job_async(job.id)
                assert running.state == JobState.RUNNING and running.cancel_requested

        t0 = time.monotonic()
        await run_worker_until(app, all_final(app), during=cancel_when_running)
        assert time.monotonic() - t0 < 5  # one heartbeat interval, not a lease
        for job in (a, s):
            final = await app.get_job_async(job.id)
            assert final is not None and final.state == JobState.CANCELLED
        await app.close_async()

    asyncio.run(main())
    assert started.is_set() and saw_flag.is_set()


def test_queued_job_cancelled_at_once_never_runs(app: Conveyor) -> None:
    ran: list[int] = []

    @app.task
    async def work(n: int) -> None:
        ran.append(n)

    job = work.options(delay=0.05).enqueue(1)
    other = work.enqueue(2)
    # Due after the cancelled job: once the worker has staged and run it, the stager has
    # passed the cancelled job's due time while the worker was running.
    later = work.options(delay=0.3).enqueue(3)
    assert app.cancel_job(job.id).state == JobState.CANCELLED

    async def main() -> None:
        await run_worker_until(app, all_final(app))
        finals = {j.id: await app.get_job_async(j.id) for j in (job, other, later)}
        assert {i: (f.state if f else None) for i, f in finals.items()} == {
            job.id: JobState.CANCELLED, other.id: JobState.COMPLETED,
            later.id: JobState.COMPLETED}
        final = finals[job.id]
        assert final is not None and final.attempt == 0 and final.attempted_at is None
        assert later.scheduled_at > job.scheduled_at
        await app.close_async()

    asyncio.run(main())
    assert sorted(ran) == [2, 3]


def test_current_job_describes_the_running_job(app: Conveyor) -> None:
    seen: dict[str, Any] = {}

    @app.task(queue="ctx")
    async def introspect(x: int, *, y: str) -> None:
        ctx = current_job()
        seen.update(id=ctx.id, attempt=ctx.attempt, args=ctx.args, kwargs=ctx.kwargs,
                    task=ctx.task, queue=ctx.queue, cancelled=ctx.cancelled)

    async def main() -> None:
        job = await introspect.enqueue_async(1, y="z")
        config = dataclasses.replace(FAST, queues={"ctx": 2})
        await run_worker_until(app, in_state(app, job, JobState.COMPLETED), config=config)
        assert seen == {"id": job.id, "attempt": 1, "args": [1], "kwargs": {"y": "z"},
                        "task": "introspect", "queue": "ctx", "cancelled": False}
        await app.close_async()

    asyncio.run(main())


def test_priorities_and_delays_order_the_work(app: Conveyor) -> None:
    order: list[str] = []

    @app.task
    async def mark(label: str) -> None:
        order.append(label)

    async def main() -> None:
        await mark.options(delay=0.4).enqueue_async("late")
        await mark.options(priority=0).enqueue_async("low")
        await mark.options(priority=9).enqueue_async("high")
        config = dataclasses.replace(FAST, queues={"default": 1})
        await run_worker_until(app, all_final(app), config=config)
        await app.close_async()

    asyncio.run(main())
    assert order == ["high", "low", "late"]


def test_burst_worker_exits_when_queue_is_empty(app: Conveyor) -> None:
    @app.task
    async def noop(i: int) -> None:
        return None

    async def main() -> None:
        await app.enqueue_many_async([noop.job(i) for i in range(200)])
        config = dataclasses.replace(FAST, burst=True, queues={"default": 20})
        await asyncio.wait_for(app.run_worker(config=config), timeout=30)
        counts = await app.count_jobs_async()
        assert counts["completed"] == 200 and sum(counts.values()) == 200
        await app.close_async()

    asyncio.run(main())


def test_a_burst_worker_waits_for_a_slow_claim_before_it_calls_the_queue_empty(
        app: Conveyor) -> None:
    """A producer whose last look found its slots held by unwritten outcomes is not
    idle while its next claim is on its way: a claim slower than burst mode's quiet
    checks (a storage thread busy writing a large ack flush) once let a burst worker
    stop with jobs still available."""
    @app.task
    async def noop(i: int) -> None:
        return None

    async def main() -> None:
        await app.enqueue_many_async([noop.job(i) for i in range(300)])
        storage = cast(Any, await app.storage()).inner  # what every view of it calls
        claim = storage.job_fetch_available
        claims = 0

        async def slow_claim(params: Any) -> Any:
            nonlocal claims
            claims += 1
            if claims > 1:
                await asyncio.sleep(0.5)  # longer than the four 50 ms quiet checks
            return await claim(params)

        ack = storage.job_ack_many

        async def slow_ack(params: Any) -> Any:
            await asyncio.sleep(0.2)  # the outcomes hold the slots a while
            return await ack(params)

        storage.job_fetch_available = slow_claim
        storage.job_ack_many = slow_ack
        try:
            config = dataclasses.replace(FAST, burst=True, queues={"default": 100},
                                         fetch_limit=100)
            await asyncio.wait_for(app.run_worker(config=config), timeout=60)
        finally:
            del storage.job_fetch_available, storage.job_ack_many
        counts = await app.count_jobs_async()
        assert counts.get("completed") == 300 and sum(counts.values()) == 300, counts
        await app.close_async()

    asyncio.run(main())


def test_shutdown_returns_unfinished_jobs_without_using_an_attempt(app: Conveyor) -> None:
    @app.task
    async def long_job() -> None:
        await asyncio.sleep(60)

    async def main() -> None:
        job = await long_job.enqueue_async()
        config = dataclasses.replace(FAST, shutdown_timeout=0.2)
        await run_worker_until(app, in_state(app, job, JobState.RUNNING), config=config)
        final = await app.get_job_async(job.id)
        assert final is not None and final.state == JobState.AVAILABLE
        assert final.attempt == 0 and final.errors == [] and final.lease_token is None
        await app.close_async()

    asyncio.run(main())


def test_a_claim_in_flight_at_shutdown_leaves_no_job_running(app: Conveyor) -> None:
    """A stop can come while a claim is on its way to the database (seen under load: a
    job snoozed at SIGTERM was claimed again by the stopping worker). The jobs that claim
    brings back run (or are given back) before the worker exits; none stays "running"
    until a rescuer finds it."""

    @app.task
    async def quick(i: int) -> int:
        return i

    async def main() -> None:
        worker = Worker(app.registry, await app.storage(), FAST)
        producer = worker.producers["default"]
        real = producer._storage
        entered, release = asyncio.Event(), asyncio.Event()

        class HeldClaims:
            """The real storage; each claim reaches it only once the test allows."""

            def __getattr__(self, name: str) -> Any:
                return getattr(real, name)

            async def job_fetch_available(self, params: Any) -> Any:
                entered.set()
                await release.wait()
                return await real.job_fetch_available(params)

        producer._storage = cast(Storage, HeldClaims())
        task = asyncio.create_task(worker.run())
        await asyncio.wait_for(entered.wait(), timeout=10)  # a claim is on its way
        job = await quick.enqueue_async(7)
        worker.request_stop()
        release.set()
        await asyncio.wait_for(task, timeout=30)
        final = await app.get_job_async(job.id)
        assert final is not None and final.state == JobState.COMPLETED and final.result == 7, final
        await app.close_async()

    asyncio.run(main())


def _held_second_claim(producer: Any, seen: Callable[[], int] = lambda: 0
                       ) -> tuple[list[int], asyncio.Event, asyncio.Event]:
    """The producer's storage, whose second claim waits until ``release`` is set: the
    limits asked for (and ``seen()`` as the second claim arrives), an Event set when
    the second claim arrives, and ``release``."""
    real = producer._storage
    asked: list[int] = []
    second, release = asyncio.Event(), asyncio.Event()

    class HeldSecondClaim:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        async def job_fetch_available(self, params: Any) -> Any:
            asked.append(params.limit)
            if len(asked) == 2:
                asked.append(seen())
                second.set()
                await release.wait()
            return await real.job_fetch_available(params)

    producer._storage = cast(Storage, HeldSecondClaim())
    return asked, second, release


def test_a_claim_ahead_stays_within_the_limit(app: Conveyor) -> None:
    """A claim that filled its demand, with room left under the limit, is followed by
    the next claim before its jobs start (claimed ahead); claimed and running never pass
    the limit."""
    gate, started = asyncio.Event(), []

    @app.task
    async def held(i: int) -> int:
        started.append(i)
        await gate.wait()
        return i

    async def main() -> None:
        await app.enqueue_many_async([held.job(i) for i in range(30)])
        config = dataclasses.replace(FAST, queues={"default": 10}, fetch_limit=4)
        worker = Worker(app.registry, await app.storage(), config)
        producer = worker.producers["default"]
        asked, second, release = _held_second_claim(producer, lambda: len(started))
        task = asyncio.create_task(worker.run())
        await asyncio.wait_for(second.wait(), timeout=10)
        # the second claim left before the first one's jobs started: claimed ahead
        assert asked == [4, 4, 0] and producer.running == 4
        release.set()
        deadline = asyncio.get_running_loop().time() + 20
        while len(started) < 10 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        assert len(started) == 10 and asked == [4, 4, 0, 2]  # then the limit is full
        counts = await app.count_jobs_async()
        assert counts["running"] == 10 and counts["available"] == 20, counts
        worker.request_stop()
        gate.set()
        await asyncio.wait_for(task, timeout=30)
        await app.close_async()

    asyncio.run(main())


def test_a_claim_ahead_on_its_way_at_a_stop_runs_its_jobs(app: Conveyor) -> None:
    """The jobs of a claim ahead still on its way when the stop comes run before the
    worker exits; none stays "running" until a rescuer finds it."""

    @app.task
    async def quick(i: int) -> int:
        return i

    async def main() -> None:
        await app.enqueue_many_async([quick.job(i) for i in range(30)])
        config = dataclasses.replace(FAST, queues={"default": 10}, fetch_limit=4)
        worker = Worker(app.registry, await app.storage(), config)
        asked, second, release = _held_second_claim(worker.producers["default"])
        task = asyncio.create_task(worker.run())
        await asyncio.wait_for(second.wait(), timeout=10)
        worker.request_stop()
        release.set()
        await asyncio.wait_for(task, timeout=30)
        counts = await app.count_jobs_async()
        assert counts.get("running", 0) == 0 and counts["completed"] == 8, (asked, counts)
        assert asked == [4, 4, 0]  # and no claim after the stop
        await app.close_async()

    asyncio.run(main())


def test_many_jobs_each_complete_exactly_once(app: Conveyor) -> None:
    seen: list[int] = []

    @app.task
    async def record(i: int) -> None:
        seen.append(i)

    async def main() -> None:
        for start in range(0, 1000, 250):
            await app.enqueue_many_async([record.job(i) for i in range(start, start + 250)])
        config = dataclasses.replace(FAST, queues={"default": 50}, fetch_limit=64)
        await run_worker_until(app, all_final(app), config=config)
        assert (await app.count_jobs_async())["completed"] == 1000
        await app.close_async()

    asyncio.run(main())
    assert sorted(seen) == list(range(1000))


def test_a_handlers_own_timeout_error_is_an_ordinary_failure(app: Conveyor) -> None:
    @app.task(max_attempts=1)
    async def calls_upstream() -> None:
        raise TimeoutError("upstream took too long")

    @app.task(max_attempts=1, timeout=0.2)
    def slow_sync() -> None:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not current_job().cancelled:
            time.sleep(0.01)

    async def main() -> None:
        own, sync = await calls_upstream.enqueue_async(), await slow_sync.enqueue_async()
        await run_worker_until(app, all_final(app))
        f_own, f_sync = await app.get_job_async(own.id), await app.get_job_async(sync.id)
        assert f_own is not None and f_own.errors[0]["error"] == "TimeoutError: upstream took too long"
        assert f_sync is not None and "past its timeout of 0.2s" in f_sync.errors[0]["error"]
        await app.close_async()

    asyncio.run(main())


def test_rescued_and_staged_jobs_are_reported_to_state_change_listeners(app: Conveyor) -> None:
    from conveyor._runtime.rescuer import Rescuer
    from conveyor._runtime.stager import Stager
    from conveyor._storage import JobFetchAvailableParams

    seen: list[Any] = []
    app.on_state_change(seen.append)

    @app.task
    async def lost() -> None: ...

    async def main() -> None:
        job = await lost.enqueue_async()
        storage = await app.storage()
        await storage.job_fetch_available(JobFetchAvailableParams("default", 1, "gone", 0.01))
        rescuer = Rescuer(await app.storage_for("rescuer"), 1.0)
        deadline = time.monotonic() + 5
        while not await rescuer.run_once():
            assert time.monotonic() < deadline, "lease never expired"
            await asyncio.sleep(0.02)
        rescued = [c for c in seen if c.source == "rescuer"]
        assert [(c.job_id, c.previous, c.state) for c in rescued] == [
            (job.id, JobState.RUNNING, JobState.AVAILABLE)]
        later = await lost.options(delay=0.01).enqueue_async()
        stager = Stager(await app.storage_for("stager"), 1.0)
        while not await stager.run_once():
            assert time.monotonic() < deadline + 5, "never due"
            await asyncio.sleep(0.02)
        staged = [c for c in seen if c.source == "stager"]
        assert [(c.job_id, c.previous, c.state) for c in staged] == [
            (later.id, JobState.SCHEDULED, JobState.AVAILABLE)]
        await app.close_async()

    asyncio.run(main())


def test_an_outcome_the_database_refuses_does_not_wedge_the_acker(app: Conveyor) -> None:
    from conveyor._runtime.acker import Acker
    from conveyor._storage import JobAck, JobFetchAvailableParams

    @app.task
    async def work(i: int) -> None: ...

    async def main() -> None:
        await app.enqueue_many_async([work.job(1), work.job(2)])
        storage = await app.storage()
        a, b = await storage.job_fetch_available(JobFetchAvailableParams("default", 2, "n", 30))
        flushed: list[set[int]] = []
        acker = Acker(storage, lambda acks, applied: flushed.append(applied))
        acker.push(JobAck(a.id, a.lease_token or 0, JobState.COMPLETED, result_json="{not json"))
        acker.push(JobAck(b.id, b.lease_token or 0, JobState.COMPLETED, result_json="2"))
        assert await acker.run_once() == 2
        assert flushed == [{a.id, b.id}]
        done_a, done_b = await app.get_job_async(a.id), await app.get_job_async(b.id)
        assert done_a is not None and done_a.state == JobState.COMPLETED and done_a.result is None
        assert done_b is not None and done_b.result == 2
        await app.close_async()

    asyncio.run(main())
