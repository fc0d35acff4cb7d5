"""A plain completion goes straight to history at its ack when the worker's
``archive_after`` is 0 (``JobAckManyParams.retire``): the hot row is not updated and then
archived, but moved in the ack's own statements, written as the update would have left
it. The same fence; jobs the archiving rule keeps hot (a unique claim on 'completed'),
and jobs with followers (dependents, a batch: their triggers fire on the update of
state), take the update. Both backends, real databases."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence

from conveyor import Conveyor, Job, JobState, Unique, WorkerConfig
from conveyor._runtime.archiver import Archiver
from conveyor._runtime.worker import Worker
from conveyor._storage import JobAck, JobAckManyParams, JobFetchAvailableParams, Storage
from conveyor._storage.schema import JOB_COLUMNS
from tests.apps.workflows_app import build

from ._runtime_util import FAST, all_final, run_then_close, run_worker_until
from .test_history import ids_in, sql

#: The archiver passes once at the worker's start, then not for an hour: what moves
#: after that moved at its ack.
WORKER = dataclasses.replace(FAST, archive_interval=3600.0)


def columns(db_url: str, table: str) -> list[str]:
    if db_url.startswith("sqlite"):
        return [r[1] for r in sql(db_url, f"PRAGMA table_info({table})")]
    return [r[0] for r in sql(db_url, "SELECT column_name FROM information_schema.columns "
                                      "WHERE table_schema = current_schema() AND table_name = %s "
                                      "ORDER BY ordinal_position", (table,))]


def test_the_listed_columns_are_both_tables_columns(db_url: str) -> None:
    """A migration that adds a column to the tables must add it to JOB_COLUMNS, or a job
    moved at its ack would lose it."""
    assert columns(db_url, "conveyor_jobs") == list(JOB_COLUMNS)
    assert columns(db_url, "conveyor_jobs_history") == list(JOB_COLUMNS)


async def claimed(s: Storage, queue: str = "default") -> list[Job]:
    return await s.job_fetch_available(JobFetchAvailableParams(
        queue=queue, limit=100, owner="node-a", lease_ttl=30.0))


def done(job: Job, token: int | None = None) -> JobAck:
    assert job.lease_token is not None
    return JobAck(job.id, job.lease_token if token is None else token, JobState.COMPLETED,
                  result_json=f'{{"n": {job.id}}}', run_time=0.25)


async def ack(s: Storage, acks: Sequence[JobAck], retire: bool = True) -> list[int]:
    return await s.job_ack_many(JobAckManyParams(acks, "node-a", retire=retire))


def run(app: Conveyor, body: Callable[[Storage], Awaitable[None]]) -> None:
    async def main() -> None:
        await body(await app.storage())

    run_then_close(app, main)


def test_a_plain_completion_moves_at_its_ack_and_reads_find_it(app: Conveyor,
                                                               db_url: str) -> None:
    @app.task
    async def work(i: int) -> int:
        return i

    async def body(s: Storage) -> None:
        await app.enqueue_many_async([work.job(i) for i in range(3)])
        jobs = await claimed(s)
        waiter = asyncio.ensure_future(app.wait_job_async(jobs[0].id, timeout=20))
        assert await ack(s, [done(j) for j in jobs[:2]]) == [jobs[0].id, jobs[1].id]
        assert await ack(s, [done(jobs[2])]) == [jobs[2].id]  # one alone moves too
        assert ids_in(db_url, "conveyor_jobs") == []
        assert ids_in(db_url, "conveyor_jobs_history") == [j.id for j in jobs]
        finished = await waiter
        assert (finished.state, finished.result) == (JobState.COMPLETED, {"n": jobs[0].id})
        for job in jobs:  # every column as the update would have written it
            got = await app.get_job_async(job.id)
            assert got is not None and got.state is JobState.COMPLETED
            assert (got.result, got.ran_on, got.run_time) == ({"n": job.id}, "node-a", 0.25)
            assert (got.lease_owner, got.lease_token, got.lease_expires_at) == (None,) * 3
            assert got.finished_at is not None and got.attempted_at == job.attempted_at
            assert (got.args, got.attempt, got.created_at) == (job.args, 1, job.created_at)
        assert [j.id for j in await app.wait_jobs_async(jobs, timeout=5)] == [j.id for j in jobs]

    run(app, body)


def test_a_fenced_off_ack_moves_nothing(app: Conveyor, db_url: str) -> None:
    @app.task
    async def work(i: int) -> None: ...

    async def body(s: Storage) -> None:
        await app.enqueue_many_async([work.job(i) for i in range(3)])
        a, b, c = await claimed(s)
        assert b.lease_token is not None and c.lease_token is not None
        # b's lease was lost (a newer token); c alone, stale, in a batch of its own
        assert await ack(s, [done(a), done(b, b.lease_token + 1)]) == [a.id]
        assert await ack(s, [done(c, c.lease_token + 1)]) == []
        assert ids_in(db_url, "conveyor_jobs") == [b.id, c.id]
        assert ids_in(db_url, "conveyor_jobs_history") == [a.id]
        for job in (b, c):
            got = await app.get_job_async(job.id)
            assert got is not None and got.state is JobState.RUNNING
            assert got.lease_token == job.lease_token

    run(app, body)


def test_jobs_kept_hot_by_the_archiving_rule_take_the_update(app: Conveyor,
                                                             db_url: str) -> None:
    @app.task(unique=Unique(key="one", states=("available", "running", "completed")))
    async def once() -> None: ...

    @app.task(unique=Unique(key="two"))  # default states: its claim ends as it completes
    async def released() -> None: ...

    async def body(s: Storage) -> None:
        first = await once.enqueue_async()
        other = await released.enqueue_async()
        jobs = await claimed(s)
        assert sorted(await ack(s, [done(j) for j in jobs])) == [first.id, other.id]
        assert ids_in(db_url, "conveyor_jobs") == [first.id]
        assert ids_in(db_url, "conveyor_jobs_history") == [other.id]
        kept = await app.get_job_async(first.id)
        assert kept is not None and (kept.state, kept.ran_on) == (JobState.COMPLETED, "node-a")
        duplicate = await once.enqueue_async()  # its claim is still found in the hot table
        assert duplicate.duplicate and duplicate.id == first.id

    run(app, body)


def test_followers_take_the_update_and_their_workflows_proceed(db_url: str) -> None:
    wf = build(db_url)
    try:
        app = wf.app
        batch = app.batch([wf.step.job("m1"), wf.step.job("m2")],
                          on_complete=wf.step.job("complete"))
        first = wf.step.enqueue("first")
        then = wf.step.options(depends_on=[first.id]).enqueue("then")
        plain = wf.step.enqueue("plain")

        async def body(s: Storage) -> None:
            jobs = await claimed(s, "wf")
            assert {j.id for j in jobs} == {*(j.id for j in batch.jobs), first.id, plain.id}
            assert sorted(await ack(s, [done(j) for j in jobs])) == sorted(j.id for j in jobs)
            # the triggers fired: the dependent and the batch's callback were released
            released = {j.id for j in await claimed(s, "wf")}
            assert released == {then.id, batch.on_complete}
            assert ids_in(db_url, "conveyor_jobs_history") == [plain.id]
            hot = dict(sql(db_url, "SELECT id, state FROM conveyor_jobs"))
            assert all(hot[i] == "completed" for i in (*(j.id for j in batch.jobs), first.id))

        run(app, body)
    finally:
        wf.app.close()


def test_a_worker_with_archive_after_0_moves_at_ack_and_waiters_see_results(
        app: Conveyor, db_url: str) -> None:
    @app.task
    async def double(i: int) -> int:
        return i * 2

    async def main() -> None:
        jobs = await app.enqueue_many_async([double.job(i) for i in range(20)])
        results: list[Job] = []

        async def waiting(worker: Worker) -> None:
            results.extend(await app.wait_jobs_async(jobs, timeout=20))

        await run_worker_until(app, all_final(app), WORKER, during=waiting)
        assert [j.result for j in results] == [i * 2 for i in range(20)]
        assert ids_in(db_url, "conveyor_jobs") == []
        assert ids_in(db_url, "conveyor_jobs_history") == [j.id for j in jobs]

    run_then_close(app, main)


def test_archive_after_above_0_leaves_completed_jobs_hot(app: Conveyor, db_url: str) -> None:
    @app.task
    async def noop(i: int) -> None: ...

    async def main() -> None:
        jobs = await app.enqueue_many_async([noop.job(i) for i in range(5)])
        config: WorkerConfig = dataclasses.replace(WORKER, archive_after=3600.0)
        await run_worker_until(app, all_final(app), config)
        assert ids_in(db_url, "conveyor_jobs") == [j.id for j in jobs]
        assert ids_in(db_url, "conveyor_jobs_history") == []
        states = {r[0] for r in sql(db_url, "SELECT state FROM conveyor_jobs")}
        assert states == {"completed"}

    run_then_close(app, main)


class NotLeader:
    is_leader = False


def test_a_node_that_does_not_lead_makes_the_partitions_its_acks_write(
        app: Conveyor, db_url: str) -> None:
    """PostgreSQL: an ack writes today's day partition of history, never DEFAULT, on any
    node: every archiver makes the partitions ahead at its start, leader or not (here
    on a database whose partitions ahead are gone, as on one migrated days ago)."""
    postgres = not db_url.startswith("sqlite")
    days = [f"conveyor_jobs_history_{c}_" + d for c in ("done", "discarded") for (d,) in sql(
        db_url, "SELECT to_char((now() + i * interval '1 day') AT TIME ZONE 'UTC', 'YYYYMMDD') "
                "FROM generate_series(0, 2) AS i")] if postgres else []
    for day in days:
        sql(db_url, f'DROP TABLE "{day}"')

    @app.task
    async def work(i: int) -> None: ...

    async def body(s: Storage) -> None:
        await Archiver(s, NotLeader(), 3600.0, after=0.0).start()
        for day in days:
            assert sql(db_url, "SELECT to_regclass(%s) IS NOT NULL", (day,)) == [(True,)]
        job = await work.enqueue_async(1)
        (claim,) = await claimed(s)
        assert await ack(s, [done(claim)]) == [job.id]
        if postgres:
            assert sql(db_url, "SELECT tableoid::regclass::text FROM conveyor_jobs_history") == [
                (days[0],)]
        else:
            assert ids_in(db_url, "conveyor_jobs_history") == [job.id]

    run(app, body)
