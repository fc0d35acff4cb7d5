"""Issue 13, progress: ``current_job().set_progress`` / ``update_meta`` from running
handlers, coalesced into a handful of fenced writes, readable through ``get_job`` and
``conveyor jobs show``; on both backends with in-process workers (the dashboard's live
bar: tests/web/test_browser.py and tests/web/test_pages.py).

Every wait is a condition with a deadline; handlers wait on events the test controls.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import threading
import time
from collections.abc import Sequence
from typing import Any, cast

import pytest

from conveyor import (
    Conveyor,
    ConveyorConfig,
    DatabaseUnavailableError,
    JobState,
    PayloadTooLargeError,
    current_job,
)
from conveyor._context import JobContext, ProgressEntry
from conveyor._job import Job
from conveyor._runtime import Worker
from conveyor._runtime.progress import ProgressFlusher
from conveyor._storage import (
    JobFetchAvailableParams,
    JobProgress,
    JobRescueExpiredParams,
    Storage,
)

from ._runtime_util import FAST, in_state, run_worker_until
from .conftest import wait_for_async
from .test_cli import invoke

#: Progress flushed often, so a test sees it soon.
QUICK = dataclasses.replace(FAST, progress_interval=0.05)


async def job_of(app: Conveyor, job_id: int) -> Job:
    job = await app.get_job_async(job_id)
    assert job is not None
    return job


class CountingStorage:
    """The real storage, counting the progress writes that reach it."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.progress_writes = 0
        self.progress_rows = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def job_progress_many(self, entries: Sequence[JobProgress]) -> list[int]:
        self.progress_writes += 1
        self.progress_rows += len(entries)
        return await self.inner.job_progress_many(entries)


# -- values reach get_job from a real worker -----------------------------------------------


def test_progress_reaches_get_job_while_the_job_runs(app: Conveyor) -> None:
    """A sync handler reports, then waits: get_job shows the report while it runs."""
    go = threading.Event()

    @app.task(name="prog_steps")
    def steps() -> str:
        current_job().set_progress(0.25, "a quarter")
        assert go.wait(20)
        current_job().set_progress(0.5, "half")
        return "done"

    async def main() -> None:
        job = await steps.enqueue_async()

        async def during(worker: Worker) -> None:
            async def quarter() -> bool:
                j = await job_of(app, job.id)
                return j.state is JobState.RUNNING and j.progress == 0.25

            await wait_for_async(quarter, timeout=15, message="progress 0.25 while running")
            running = await job_of(app, job.id)
            assert running.progress_message == "a quarter"
            assert running.to_dict()["progress"] == 0.25
            go.set()

        await run_worker_until(app, in_state(app, job, JobState.COMPLETED), QUICK,
                               during=during)
        done = await job_of(app, job.id)
        assert (done.progress, done.progress_message, done.result) == (0.5, "half", "done")

    asyncio.run(main())


def test_the_last_report_is_written_at_the_job_end(app: Conveyor) -> None:
    """No periodic flush in the job's lifetime (a long interval): the value a handler
    reported last is still written, before the outcome, for async and sync handlers."""

    @app.task(name="prog_async_end")
    async def async_end() -> None:
        current_job().set_progress(0.1, "start")
        current_job().set_progress(1.0, "finished")

    @app.task(name="prog_sync_end")
    def sync_end() -> None:
        current_job().set_progress(0.7, None)
        current_job().update_meta({"rows": 7})

    async def main() -> None:
        a = await async_end.enqueue_async()
        s = await sync_end.enqueue_async()
        slow = dataclasses.replace(FAST, progress_interval=3600.0)
        await run_worker_until(app, lambda: _all_completed(app, a, s), slow)
        done_a, done_s = await job_of(app, a.id), await job_of(app, s.id)
        assert (done_a.progress, done_a.progress_message) == (1.0, "finished")
        assert (done_s.progress, done_s.progress_message, done_s.meta) == (0.7, None, {"rows": 7})

    asyncio.run(main())


class SlowProgressStorage(CountingStorage):
    """Progress writes that take a while to reach the database (a slow network)."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.entered = asyncio.Event()

    async def job_progress_many(self, entries: Sequence[JobProgress]) -> list[int]:
        self.entered.set()
        await asyncio.sleep(0.5)
        return await super().job_progress_many(entries)


def test_a_job_ending_during_a_flush_waits_for_it_before_its_outcome(app: Conveyor) -> None:
    """The job's last report is in a periodic pass still on its way when the handler
    returns: the outcome waits for that write, else the fence would refuse it (the
    outcome clears the lease) and the last report would be lost."""
    box: dict[str, SlowProgressStorage] = {}

    @app.task(name="prog_race")
    async def race() -> None:
        current_job().set_progress(0.5, "last")
        await box["storage"].entered.wait()  # the pass carrying it has started

    async def main() -> None:
        job = await race.enqueue_async()
        box["storage"] = slow = SlowProgressStorage(cast(Any, await app.storage()).inner)
        worker = Worker(app.registry, cast(Storage, slow), QUICK)
        task = asyncio.create_task(worker.run())
        try:
            await wait_for_async(lambda: _all_completed(app, job), timeout=20,
                                 message="the job to complete")
        finally:
            worker.request_stop()
            await asyncio.wait_for(task, timeout=30)
        done = await job_of(app, job.id)
        assert (done.progress, done.progress_message) == (0.5, "last")

    asyncio.run(main())


async def _all_completed(app: Conveyor, *jobs: Job) -> bool:
    found = [await app.get_job_async(j.id) for j in jobs]
    return all(j is not None and j.state is JobState.COMPLETED for j in found)


# -- coalescing ------------------------------------------------------------------------------


def test_ten_thousand_reports_cause_a_handful_of_writes(app: Conveyor) -> None:
    """10,000 set_progress calls over about a second, by each of two jobs (async and
    sync), reach the database in a few statements: the interval's, plus the end."""

    @app.task(name="prog_many_async")
    async def many_async() -> None:
        for i in range(10_000):
            current_job().set_progress(i / 9_999, f"item {i}")
            if i % 100 == 0:
                await asyncio.sleep(0.01)

    @app.task(name="prog_many_sync")
    def many_sync() -> None:
        for i in range(10_000):
            current_job().set_progress(i / 9_999, f"item {i}")
            if i % 100 == 0:
                current_job().shutdown_requested.wait(0.01)  # a step of real work

    async def main() -> None:
        a = await many_async.enqueue_async()
        s = await many_sync.enqueue_async()
        counting = CountingStorage(cast(Any, await app.storage()).inner)
        config = dataclasses.replace(FAST, progress_interval=0.5)
        worker = Worker(app.registry, cast(Storage, counting), config)
        task = asyncio.create_task(worker.run())
        started = time.monotonic()
        try:
            await wait_for_async(lambda: _all_completed(app, a, s), timeout=20,
                                 message="both jobs to complete")
            elapsed = time.monotonic() - started
        finally:
            worker.request_stop()
            await asyncio.wait_for(task, timeout=30)
        for job in (a, s):
            done = await job_of(app, job.id)
            assert (done.progress, done.progress_message) == (1.0, "item 9999")
        # one flush per interval (0.5 s, jitter 10 %) while they ran, one at each end:
        # about 5 for 20,000 reports over ~1 s; a write per report would be thousands
        bound = math.ceil(elapsed / 0.45) + 3
        writes = counting.progress_writes
        assert 1 <= writes <= min(bound, 20), f"{writes} writes in {elapsed:.2f}s"
        print(f"20,000 reports: {writes} progress writes in {elapsed:.2f}s")
        assert counting.progress_rows <= 2 * counting.progress_writes
        assert worker.progress.flushes == counting.progress_writes

    asyncio.run(main())


# -- fencing ---------------------------------------------------------------------------------


def test_an_attempt_that_lost_its_lease_writes_no_progress(app: Conveyor) -> None:
    """Attempt 1 is rescued (its lease ran out) and attempt 2 claims the job; attempt
    1's late flush matches no row, attempt 2's lands."""

    @app.task(name="prog_fenced")
    def fenced() -> None: ...

    async def main() -> None:
        job = await fenced.enqueue_async()
        storage = await app.storage()
        first = await _claim(storage, "node-a", lease_ttl=0.2)
        stale = ProgressEntry(first)
        stale.set_progress(0.3, "attempt 1")
        assert await ProgressFlusher(storage, lambda: [stale], 1.0).run_once() == 1

        async def rescued() -> bool:
            await storage.job_rescue_expired(JobRescueExpiredParams())
            return (await job_of(app, job.id)).state is JobState.AVAILABLE

        await wait_for_async(rescued, timeout=10, message="attempt 1 rescued")
        second = await _claim(storage, "node-b", lease_ttl=30.0)
        assert second.lease_token != first.lease_token
        stale.set_progress(0.9, "attempt 1, late")
        assert await ProgressFlusher(storage, lambda: [stale], 1.0).run_once() == 0
        after = await job_of(app, job.id)
        assert (after.progress, after.progress_message) == (0.3, "attempt 1")
        late = JobProgress(first.id, first.lease_token or 0, 0.95, "late", '{"x": 1}')
        assert await storage.job_progress_many([late]) == []
        fresh = ProgressEntry(second)
        fresh.set_progress(0.6, "attempt 2")
        assert await ProgressFlusher(storage, lambda: [fresh], 1.0).run_once() == 1
        now = await job_of(app, job.id)
        assert (now.progress, now.progress_message, now.meta) == (0.6, "attempt 2", {})

    asyncio.run(main())


async def _claim(storage: Storage, owner: str, lease_ttl: float) -> Job:
    claimed = await storage.job_fetch_available(
        JobFetchAvailableParams(queue="default", limit=1, owner=owner, lease_ttl=lease_ttl))
    assert len(claimed) == 1
    return claimed[0]


# -- bad values ------------------------------------------------------------------------------

BAD_PROGRESS: list[tuple[Any, Any, type[Exception]]] = [
    (1.5, None, ValueError), (-0.01, None, ValueError), (math.nan, None, ValueError),
    (math.inf, None, ValueError), ("0.5", None, TypeError), (True, None, TypeError),
    (None, None, TypeError), (0.5, 42, TypeError),
]


def test_bad_values_are_refused_and_lose_nothing(db_url: str) -> None:
    """Each bad call raises a clear error in the handler; what was reported before
    stays, and the job still completes with it. Meta is capped like meta at enqueue."""
    seen: list[str] = []
    app = Conveyor(db_url, config=ConveyorConfig(max_payload_bytes=1_000))

    @app.task(name="prog_bad")
    def bad() -> None:
        ctx = current_job()
        ctx.set_progress(0.4, "good")
        ctx.update_meta({"kept": True})
        calls: list[tuple[Any, type[Exception]]] = [
            (lambda f=f, m=m: ctx.set_progress(f, m), e) for f, m, e in BAD_PROGRESS]
        calls += [
            (lambda: ctx.update_meta(cast(Any, [("a", 1)])), TypeError),
            (lambda: ctx.update_meta(cast(Any, {1: "x"})), TypeError),
            (lambda: ctx.update_meta({"obj": object()}), TypeError),
            (lambda: ctx.update_meta({"big": "x" * 5_000}), PayloadTooLargeError),
        ]
        for call, expected in calls:
            try:
                call()
            except expected as exc:
                seen.append(f"{type(exc).__name__}: {exc}")
        assert ctx.progress == 0.4 and ctx.meta == {"kept": True}

    async def main() -> None:
        try:
            job = await bad.enqueue_async()
            await run_worker_until(app, in_state(app, job, JobState.COMPLETED), QUICK)
            done = await job_of(app, job.id)
            assert (done.progress, done.progress_message, done.meta) == (0.4, "good",
                                                                        {"kept": True})
        finally:
            # Close on this loop: a pool left open when asyncio.run tears its loop down
            # may be growing (connecting) then, and its cancelled connect can hang the run.
            await app.close_async()

    try:
        asyncio.run(main())
    finally:
        app.close()
    assert len(seen) == len(BAD_PROGRESS) + 4, seen
    assert any("from 0.0 to 1.0, got 1.5" in s for s in seen), seen
    assert any("over 1000 bytes" in s for s in seen), seen


def test_a_message_is_cut_and_made_storable() -> None:
    """A huge message is cut to 1,000 characters; NUL and lone surrogates, which a
    database refuses, are replaced, so the flush can never fail on them."""
    entry = ProgressEntry(_job())
    entry.set_progress(1, "x" * 5_000)
    assert entry.reported == (1.0, "x" * 1_000)
    entry.set_progress(0, "a\x00b\ud800c")
    assert entry.reported is not None and entry.reported[1] == "a\ufffdb\ufffdc"


def test_current_job_outside_a_worker_keeps_reports_in_memory() -> None:
    ctx = JobContext(_job(meta={"a": 1}))
    assert ctx.progress is None
    ctx.set_progress(0.5)
    ctx.update_meta({"b": 2})
    assert ctx.progress == 0.5
    assert ctx.meta == {"a": 1, "b": 2}


def _job(**fields: Any) -> Job:
    from datetime import UTC, datetime
    now = datetime.now(UTC)
    return Job(id=1, task="t", queue="default", args=[], kwargs={}, priority=0,
               state=JobState.RUNNING, attempt=1, max_attempts=3, scheduled_at=now,
               created_at=now, lease_token=7, **fields)


# -- meta ------------------------------------------------------------------------------------


def test_update_meta_merges_keys_into_the_enqueued_meta(app: Conveyor) -> None:
    @app.task(name="prog_meta")
    async def meta() -> dict[str, Any]:
        current_job().update_meta({"b": 2, "nested": {"x": [1, 2]}})
        current_job().update_meta({"a": 3})
        return current_job().meta

    async def main() -> None:
        job = await meta.options(meta={"a": 1, "keep": "yes"}).enqueue_async()
        await run_worker_until(app, in_state(app, job, JobState.COMPLETED), QUICK)
        done = await job_of(app, job.id)
        expected = {"a": 3, "keep": "yes", "b": 2, "nested": {"x": [1, 2]}}
        assert done.meta == expected and done.result == expected
        assert done.progress is None  # meta alone leaves progress unset

    asyncio.run(main())


# -- drain and inline mode -------------------------------------------------------------------


def test_drain_and_inline_mode_write_progress(app: Conveyor) -> None:
    @app.task(name="prog_drained")
    def drained(n: int) -> None:
        current_job().set_progress(n / 10, f"n={n}")

    job = drained.enqueue(3)
    assert len(app.drain().completed) == 1
    done = app.get_job(job.id)
    assert done is not None and (done.progress, done.progress_message) == (0.3, "n=3")
    with app.inline():
        inline = drained.enqueue(8)
    ran = app.get_job(inline.id)
    assert ran is not None and (ran.state, ran.progress) == (JobState.COMPLETED, 0.8)


# -- the CLI ---------------------------------------------------------------------------------


def test_jobs_show_has_a_progress_line(app: Conveyor, db_url: str) -> None:
    @app.task(name="prog_cli", max_attempts=1)
    def cli_task() -> None:  # stops short: a completed job shows 100% (test_progress_done)
        current_job().set_progress(0.45, "resizing 45 of 100")
        raise RuntimeError("stopped at 45%")

    job = cli_task.enqueue()
    app.drain()
    shown = invoke("jobs", "show", str(job.id), "--url", db_url)
    assert shown.exit_code == 0, shown.output
    line = next(line for line in shown.output.splitlines() if line.startswith("progress"))
    assert "[#########-----------]  45%  resizing 45 of 100" in line
    as_json = invoke("jobs", "show", str(job.id), "--json", "--url", db_url)
    assert '"progress": 0.45' in as_json.output
    assert '"progress_message": "resizing 45 of 100"' in as_json.output


def test_the_interval_is_checked() -> None:
    from conveyor import WorkerConfig
    for bad in (0, -1, math.inf, math.nan):
        with pytest.raises(ValueError, match="progress_interval"):
            WorkerConfig(progress_interval=bad)


# -- the dashboard (the bar moving live, in a real browser: tests/web/test_browser.py) ----


def test_the_job_page_and_the_jobs_list_show_a_bar(app: Conveyor) -> None:
    from .web.conftest import browser_for

    @app.task(name="prog_page", max_attempts=1)
    def page_task() -> None:  # stops short: a completed job shows 100% (test_progress_done)
        current_job().set_progress(0.3, "<b>thirty</b>")
        raise RuntimeError("stopped at 30%")

    job = page_task.enqueue()
    other = page_task.enqueue()
    assert [o.job.id for o in app.drain(max_jobs=1).discarded] == [job.id]
    for browser in browser_for(app):
        page = browser.get(f"/jobs/{job.id}").text
        assert '<progress value="0.3" max="1"' in page and ">30%<" in page
        assert "&lt;b&gt;thirty&lt;/b&gt;" in page and "<b>thirty" not in page
        listing = browser.get("/jobs").text
        assert f'<tr data-job="{job.id}">' in listing and 'data-progress="0.3"' in listing
        alone = browser.get(f"/jobs/{other.id}").text  # never reported: no bar
        assert f"Job {other.id}" in alone and 'id="job-progress"' not in alone


def test_a_flush_that_fails_keeps_the_reports_for_the_next_one(db_url: str) -> None:
    """The database goes away (its storage is closed under the flusher): the pass
    raises (the service logs it and retries), nothing is marked written, and the next
    pass, on a storage that works, writes the latest value."""

    async def main() -> None:
        first = Conveyor(db_url)
        task = first.task(name="prog_dead_db")(lambda: None)
        job = await task.enqueue_async()
        storage = await first.storage()
        claimed = await _claim(storage, "node-a", lease_ttl=60.0)
        entry = ProgressEntry(claimed)
        entry.set_progress(0.2, "before")
        await first.close_async()  # the storage is gone
        with pytest.raises(DatabaseUnavailableError):
            await ProgressFlusher(storage, lambda: [entry], 1.0).run_once()
        assert entry.dirty, "a failed pass must not drop the report"
        entry.set_progress(0.4, "after")
        second = Conveyor(db_url)
        try:
            flusher = ProgressFlusher(await second.storage(), lambda: [entry], 1.0)
            assert await flusher.run_once() == 1 and not entry.dirty
            seen = await job_of(second, job.id)
            assert (seen.progress, seen.progress_message) == (0.4, "after")
        finally:
            await second.close_async()

    asyncio.run(main())
