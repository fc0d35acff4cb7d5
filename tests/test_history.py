"""Finished jobs leave the hot table for history (issue 15): the archiver moves them,
every read still finds them, a retry brings one back with its id, rows holding a unique
claim stay, and retention empties history (dropping whole days on PostgreSQL, by row on
SQLite) while honouring per-queue retention. Both backends, real databases."""

# The statements below are built from this file's constants only.
# ruff: noqa: S608

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sqlite3
from contextlib import closing
from typing import Any

import click
import psycopg
import pytest

from conveyor import Conveyor, DatabaseUnavailableError, JobState, Unique, WorkerConfig
from conveyor._app.operations import Operations
from conveyor._runtime.archiver import Archiver
from conveyor._storage import JobFailureGroupsParams, JobFilter, JobSearchParams

from ._runtime_util import FAST, all_final, run_then_close, run_worker_until

#: The worker's own archiver passes once at its start, then not for an hour: the tests
#: move jobs themselves (``archive``) and see what each pass does.
WORKER = dataclasses.replace(FAST, archive_interval=3600.0)


def sql(db_url: str, statement: str, values: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement on the test database directly (no Conveyor code)."""
    if db_url.startswith("sqlite"):
        with closing(sqlite3.connect(db_url.removeprefix("sqlite:///"), isolation_level=None)) as c:
            return c.execute(statement.replace("%s", "?"), values).fetchall()
    with psycopg.connect(db_url, autocommit=True) as conn:
        cur = conn.execute(statement, values or None)
        return cur.fetchall() if cur.description else []


def ids_in(db_url: str, table: str) -> list[int]:
    return [r[0] for r in sql(db_url, f"SELECT id FROM {table} ORDER BY id")]


def age(db_url: str, ids: list[int], days: float) -> None:
    """Make these finished jobs look finished ``days`` days ago, wherever they are (on
    PostgreSQL a history row moves to that day's partition, or DEFAULT)."""
    marks = ", ".join(["%s"] * len(ids))
    if db_url.startswith("sqlite"):
        when = f"(julianday('now') - 2440587.5) * 86400.0 - {days * 86400.0}"
    else:
        when = f"now() - interval '{days * 86400.0} seconds'"
    for table in ("conveyor_jobs", "conveyor_jobs_history"):
        sql(db_url, f"UPDATE {table} SET finished_at = {when} WHERE id IN ({marks})", tuple(ids))


async def archive(app: Conveyor) -> int:
    """Move what is finished. The worker's own archiver passes once at its start and may
    have moved some already: tests check the tables, not this count."""
    return await Archiver(await app.storage(), None, 1.0, after=0.0).run_once()


def test_finished_jobs_leave_the_hot_table_and_every_read_finds_them(
    app: Conveyor, db_url: str
) -> None:
    @app.task(max_attempts=1)
    async def work(i: int) -> int:
        if i % 3 == 0:
            raise ValueError(f"bad {i}")
        return i * 2

    async def main() -> None:
        jobs = await app.enqueue_many_async([work.job(i) for i in range(9)])
        waiting = await work.options(delay=3600).enqueue_async(99)
        cancelled = await app.cancel_job_async(waiting.id)
        live = await work.options(delay=3600).enqueue_async(100)
        await run_worker_until(app, lambda: _final_except(app, live.id), WORKER)
        await archive(app)
        assert ids_in(db_url, "conveyor_jobs") == [live.id]  # only the live job stays hot
        assert ids_in(db_url, "conveyor_jobs_history") == sorted(
            [j.id for j in jobs] + [cancelled.id])
        assert await archive(app) == 0  # nothing left to move

        for job in jobs:
            got = await app.get_job_async(job.id)
            assert got is not None and got.args == job.args
            i = job.args[0]
            assert got.state == (JobState.DISCARDED if i % 3 == 0 else JobState.COMPLETED)
            assert got.result == (None if i % 3 == 0 else i * 2)
        listed = await app.list_jobs_async(limit=100)
        assert [j.id for j in listed] == sorted([j.id for j in jobs] + [cancelled.id, live.id],
                                                reverse=True)
        assert [j.id for j in await app.list_jobs_async(state=JobState.DISCARDED)] == \
            [j.id for j in reversed(jobs) if j.args[0] % 3 == 0]
        counts = await app.count_jobs_async()
        assert (counts["completed"], counts["discarded"], counts["cancelled"],
                counts["scheduled"]) == (6, 3, 1, 1)
        ops = Operations(app)
        found = await ops.search_jobs(JobFilter(states=(JobState.DISCARDED,)), 50)
        assert {j.id for j in found} == {j.id for j in jobs if j.args[0] % 3 == 0}
        storage = await app.storage()
        page = await storage.job_search(JobSearchParams(JobFilter(), 3, before_id=live.id))
        assert [j.id for j in page] == [cancelled.id, jobs[-1].id, jobs[-2].id]
        assert await ops.count_matching(JobFilter(error_key="ValueError: bad 3"), 100) == 1
        assert await ops.count_matching(JobFilter(states=(JobState.DISCARDED,)), 100) == 3
        groups = await storage.job_failure_groups(JobFailureGroupsParams())
        assert sorted(g.error for g in groups) == ["ValueError: bad 0", "ValueError: bad 3",
                                                   "ValueError: bad 6"]

    run_then_close(app, main)


async def _final_except(app: Conveyor, live: int) -> bool:
    counts = await app.count_jobs_async()
    return counts["available"] + counts["running"] + counts["retryable"] == 0 and \
        counts["scheduled"] == 1


def test_retry_moves_a_job_back_from_history_with_its_id(app: Conveyor, db_url: str) -> None:
    runs: list[int] = []

    @app.task(max_attempts=1)
    async def flaky(i: int) -> int:
        runs.append(i)
        if len(runs) == 1:
            raise RuntimeError("first run fails")
        return i

    async def main() -> None:
        job = await flaky.enqueue_async(7)
        await run_worker_until(app, all_final(app), WORKER)
        await archive(app)
        assert ids_in(db_url, "conveyor_jobs") == []
        retried = await app.retry_job_async(job.id)
        assert (retried.id, retried.state) == (job.id, JobState.AVAILABLE)
        assert ids_in(db_url, "conveyor_jobs") == [job.id]
        assert ids_in(db_url, "conveyor_jobs_history") == []
        await run_worker_until(app, all_final(app), WORKER)
        done = await app.get_job_async(job.id)
        assert done is not None and (done.state, done.result, runs) == (
            JobState.COMPLETED, 7, [7, 7])
        assert len(done.errors) == 1  # the first attempt's error came back with the row
        # a bulk retry reaches history too (Operations: the dashboard and CLI)
        await archive(app)
        assert ids_in(db_url, "conveyor_jobs") == []
        assert await Operations(app).retry_matching(
            JobFilter(states=(JobState.COMPLETED,)), 10) == 1
        assert ids_in(db_url, "conveyor_jobs") == [job.id]
        again = await app.get_job_async(job.id)
        assert again is not None and again.state == JobState.AVAILABLE

    run_then_close(app, main)


def test_rows_holding_a_unique_claim_stay_hot(app: Conveyor, db_url: str) -> None:
    @app.task(unique=Unique(key="one", states=("available", "running", "completed")))
    async def once() -> None: ...

    @app.task(unique=Unique(key="two"))  # default states: the claim ends when it finishes
    async def released() -> None: ...

    async def main() -> None:
        first = await once.enqueue_async()
        other = await released.enqueue_async()
        await run_worker_until(app, all_final(app), WORKER)
        await archive(app)
        assert ids_in(db_url, "conveyor_jobs") == [first.id]
        assert ids_in(db_url, "conveyor_jobs_history") == [other.id]
        duplicate = await once.enqueue_async()  # the claim is still found in the hot table
        assert duplicate.duplicate and duplicate.id == first.id
        fresh = await released.enqueue_async()
        assert not fresh.duplicate and fresh.id != other.id

    run_then_close(app, main)


def test_delete_and_purge_reach_history(app: Conveyor, db_url: str) -> None:
    @app.task()
    async def noop(i: int) -> None: ...

    async def main() -> None:
        jobs = await app.enqueue_many_async([noop.job(i) for i in range(5)])
        await run_worker_until(app, all_final(app), WORKER)
        await archive(app)
        assert len(ids_in(db_url, "conveyor_jobs_history")) == 5
        deleted = await app.delete_job_async(jobs[0].id)
        assert deleted.id == jobs[0].id and await app.get_job_async(jobs[0].id) is None
        assert await app.purge_jobs_async(dry_run=True) == 4
        assert await app.purge_jobs_async(batch_size=3) == 4
        assert ids_in(db_url, "conveyor_jobs_history") == []
        await app.enqueue_many_async([noop.job(i) for i in range(3)], )
        await run_worker_until(app, all_final(app), WORKER)
        await archive(app)
        assert await Operations(app).delete_queue_jobs("default") == 3
        assert sum((await app.count_jobs_async()).values()) == 0

    run_then_close(app, main)


def test_retention_empties_history_and_honours_queue_retention(
    app: Conveyor, db_url: str
) -> None:
    """PostgreSQL drops the day partition past every retention (it is gone, newer rows
    stay); SQLite deletes the same rows one by one. A queue that keeps its jobs longer
    keeps them, and rows past a shorter retention inside kept days go by row."""
    postgres = not db_url.startswith("sqlite")

    @app.task()
    async def noop(i: int) -> None: ...

    async def main() -> None:
        old = await app.enqueue_many_async([noop.job(i) for i in range(3)])
        kept = await noop.options(queue="audit").enqueue_async(10)
        mid = await noop.enqueue_async(20)
        new = await noop.enqueue_async(30)
        await run_worker_until(app, all_final(app), config=WorkerConfig(
            queues={"default": 2, "audit": 1}, stage_interval=0.05, archive_interval=3600.0,
            shutdown_timeout=5.0))
        await app.set_queue_retention_async("audit", completed=30 * 86400.0)
        if postgres:  # a partition for that day, as the archiver made it then
            sql(db_url, "SELECT conveyor_history_prepare(now() - interval '10 days', 0)")
        age(db_url, [j.id for j in old] + [kept.id], days=10)
        age(db_url, [mid.id], days=2)
        await archive(app)
        day = _partition_names(db_url, days_ago=10)
        assert await app.prune_now_async(dry_run=True) == 4
        assert await app.prune_now_async() == 4
        assert ids_in(db_url, "conveyor_jobs_all") == sorted([kept.id, new.id])
        if postgres:
            # the audit queue's 30 days keep the 10-day-old partition; rows go by row
            assert sql(db_url, "SELECT to_regclass(%s) IS NOT NULL", (day,)) == [(True,)]
            await app.set_queue_retention_async("audit", completed=None)
            assert await app.prune_now_async() == 1
            assert sql(db_url, "SELECT to_regclass(%s) IS NULL", (day,)) == [(True,)]
            assert ids_in(db_url, "conveyor_jobs_all") == [new.id]

    run_then_close(app, main)


def _partition_names(db_url: str, days_ago: int) -> str:
    if db_url.startswith("sqlite"):
        return ""
    ((name,),) = sql(db_url, "SELECT 'conveyor_jobs_history_done_' || to_char("
                             f"(now() - interval '{days_ago} days') AT TIME ZONE 'UTC', 'YYYYMMDD')")
    assert sql(db_url, "SELECT to_regclass(%s) IS NOT NULL", (name,)) == [(True,)]
    ((held,),) = sql(db_url, f'SELECT count(*) FROM "{name}"')
    assert held == 4  # three old default-queue jobs and the audit one
    return str(name)


def test_archiving_while_an_operator_retries_loses_and_duplicates_nothing(
    app: Conveyor, db_url: str
) -> None:
    @app.task(max_attempts=1)
    async def fails(i: int) -> None:
        raise ValueError("no")

    async def main() -> None:
        jobs = await app.enqueue_many_async([fails.job(i) for i in range(60)])
        await run_worker_until(app, all_final(app), WORKER)
        storage = await app.storage()
        archiver = Archiver(storage, None, 1.0, after=0.0, batch=7)

        async def archive_all() -> int:
            return sum([await archiver.run_once() for _ in range(3)])

        archiving = asyncio.create_task(archive_all())
        retried = await asyncio.gather(*(app.retry_job_async(j.id) for j in jobs))
        await archiving
        assert all(r.state == JobState.AVAILABLE for r in retried)
        hot, history = ids_in(db_url, "conveyor_jobs"), ids_in(db_url, "conveyor_jobs_history")
        assert hot == [j.id for j in jobs] and history == []  # every job once, all back
        counts = await app.count_jobs_async()
        assert counts["available"] == 60 and sum(counts.values()) == 60

    run_then_close(app, main)


def test_archiver_on_a_dead_database_fails_clearly_and_retries(
    app: Conveyor, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        storage = await app.storage()
        archiver = Archiver(storage, None, 0.01, after=0.0)
        await app.close_async()  # the database is gone for this storage
        with pytest.raises(DatabaseUnavailableError):
            await archiver.run_once()
        stopping = asyncio.Event()
        with caplog.at_level(logging.WARNING, logger="conveyor.service"):
            runner = asyncio.create_task(archiver.run(stopping))
            deadline = asyncio.get_running_loop().time() + 10
            while sum("archiver pass failed" in r.message for r in caplog.records) < 2:
                assert asyncio.get_running_loop().time() < deadline, caplog.text
                await asyncio.sleep(0.01)
            stopping.set()
            await runner
        assert "DatabaseUnavailableError" in caplog.text

    asyncio.run(main())


@pytest.mark.parametrize("field, value", [
    ("archive_after", -1.0), ("archive_after", float("nan")), ("archive_after", float("inf")),
    ("archive_interval", 0.0), ("archive_interval", -2.0),
])
def test_archive_settings_refuse_bad_values(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        WorkerConfig(**{field: value})  # type: ignore[arg-type]


def test_the_worker_archives_on_its_own(app: Conveyor, db_url: str) -> None:
    @app.task()
    async def noop(i: int) -> None: ...

    async def main() -> None:
        await app.enqueue_many_async([noop.job(i) for i in range(20)])

        async def archived() -> bool:
            return await all_final(app)() and ids_in(db_url, "conveyor_jobs") == []

        await run_worker_until(app, archived, config=WorkerConfig(
            queues={"default": 4}, stage_interval=0.05, archive_interval=0.05,
            shutdown_timeout=5.0))
        assert len(ids_in(db_url, "conveyor_jobs_history")) == 20

    run_then_close(app, main)


def test_the_worker_command_takes_the_archive_flags() -> None:
    """``conveyor worker`` grows one flag per setting: archive_after may be 0 (its
    default), archive_interval may not."""
    from conveyor.cli.worker import _param_type

    after, interval = _param_type("archive_after", float), _param_type("archive_interval", float)
    assert isinstance(after, click.FloatRange) and isinstance(interval, click.FloatRange)
    assert after.convert(0.0, None, None) == 0.0
    with pytest.raises(click.BadParameter):
        interval.convert(0.0, None, None)


@pytest.mark.sqlite
def test_sqlite_archives_in_short_transactions_that_let_claims_in(tmp_path: Any) -> None:
    """On SQLite the archiver's batch is split into transactions of ARCHIVE_BATCH jobs,
    each its own turn on the one writer: a claim asked for while a large batch moves is
    answered before the batch ends, and the batch still moves what it was asked to."""
    from conveyor._storage import JobArchiveParams, JobFetchAvailableParams
    from conveyor._storage.sqlite.storage import ARCHIVE_BATCH

    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    app = Conveyor(url)
    finished = 2 * ARCHIVE_BATCH + 7

    @app.task()
    async def noop(i: int) -> None: ...

    async def main() -> None:
        await app.enqueue_many_async([noop.job(i) for i in range(finished + 1)])
        sql(url, "UPDATE conveyor_jobs SET state = 'completed', finished_at = 0 WHERE id <= ?",
            (finished,))
        storage = await app.storage()
        done: list[str] = []

        async def step(name: str, call: Any) -> Any:
            result = await call
            done.append(name)
            return result

        moved, claimed = await asyncio.gather(
            step("archive", storage.job_archive(JobArchiveParams(0.0, finished - 1))),
            step("claim", storage.job_fetch_available(
                JobFetchAvailableParams("default", 1, "n", 30.0))))
        assert done == ["claim", "archive"]
        assert moved == finished - 1 and [j.id for j in claimed] == [finished + 1]
        assert await storage.job_archive(JobArchiveParams(0.0, 5000)) == 1
        assert len(ids_in(url, "conveyor_jobs_history")) == finished
        assert ids_in(url, "conveyor_jobs") == [finished + 1]

    run_then_close(app, main)
