"""PostgreSQL: a completion reaches its dependents through the primary key, whatever the
statistics say.

The dependency triggers find one dependent with ``WHERE id = ... AND state = 'pending'``.
On statistics taken while no job was pending (what a queue that ran only plain jobs
leaves), the planner once sent those lookups through the partial state index, which
walks every pending entry to find one id: each completion cost more the more jobs were
pending (a 10 x 1,000 DAG drained in 10.6 s instead of 2.1 s, ``bench/analysis.md``).
This test takes exactly those statistics, completes a DAG and a set of batches, and
counts the state index's scans: none. SQLite finds a row by its rowid before any index, so the
question does not arise there.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import datetime

import psycopg
import pytest

from conveyor import JobState, Workflow, chord, group
from conveyor._storage import (
    JobAck,
    JobAckManyParams,
    JobArchiveParams,
    JobFetchAvailableParams,
    Storage,
    WakeHub,
    create_storage,
)
from conveyor._workflow import Ref
from tests.apps.workflows_app import WorkflowTasks, build
from tests.conftest import WaitFor, truncate_conveyor_tables

pytestmark = pytest.mark.postgres

LAYERS, WIDTH, BATCHES, MEMBERS = 4, 150, 30, 5
#: Tables whose statistics the tests set: autovacuum stays off for them meanwhile.
QUIET = ("conveyor_jobs", "conveyor_job_deps")
SCANS = ("SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_indexes"
         " WHERE relname = 'conveyor_jobs' AND indexrelname = 'conveyor_jobs_state_idx'")


@pytest.fixture
def pg_wf(postgres_db_url: str) -> Iterator[tuple[str, WorkflowTasks, datetime]]:
    """The workflow tasks on the session's database, with autovacuum off for the jobs
    and edges tables during the test: an automatic ANALYZE would replace the statistics under test
    (and hide the fault rather than show it). Also the database's time before the app
    opened any connection (``published_count`` waits only for connections since)."""
    truncate_conveyor_tables(postgres_db_url)
    with psycopg.connect(postgres_db_url, autocommit=True) as conn:
        for table in QUIET:
            conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = off)")
        row = conn.execute("SELECT clock_timestamp()").fetchone()
        assert row is not None
    tasks = build(postgres_db_url)
    try:
        yield postgres_db_url, tasks, row[0]
    finally:
        tasks.app.close()
        with psycopg.connect(postgres_db_url, autocommit=True) as conn:
            for table in QUIET:
                conn.execute(f"ALTER TABLE {table} RESET (autovacuum_enabled)")


def analyze_without_pending_rows(url: str) -> None:
    """Statistics of a table holding only finished jobs (inserted with triggers off, as
    the bench's earlier cases leave it), then an empty table that keeps them."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute("INSERT INTO conveyor_jobs (task, queue, args, kwargs, state, deps_pending,"
                     " followers) SELECT 'step', 'wf', '[]', '{}', 'completed', 0, false"
                     " FROM generate_series(1, 5000)")
        conn.execute("ANALYZE conveyor_jobs")
        conn.execute("DELETE FROM conveyor_jobs")


def published_count(url: str, query: str, wait_for: WaitFor, since: datetime) -> int:
    """``query`` (one number from the statistics views) once every other backend of the
    database opened ``since`` (the test's app's) has exited (a backend publishes its
    counts at exit at the latest). A connection older than the test is another test's
    business (a fixture's pool, a PgBouncer's server connection): not waited on."""
    others = ("SELECT pid, application_name, state, backend_start FROM pg_stat_activity"
              " WHERE datname = current_database() AND backend_type = 'client backend'"
              " AND pid <> pg_backend_pid() AND backend_start >= %s")
    left: list[tuple[object, ...]] = []
    with psycopg.connect(url, autocommit=True) as conn:
        def closed() -> bool:
            left[:] = conn.execute(others, (since,)).fetchall()
            return not left

        try:
            wait_for(closed, timeout=30, message="the app's connections to close")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; still open: {left}") from None
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(query).fetchone()
        assert row is not None
        return int(row[0])


def dag(tasks: WorkflowTasks) -> Workflow:
    """LAYERS layers of WIDTH jobs, each depending on two jobs of the layer before."""
    flow, before = Workflow(), list[Ref]()
    for layer in range(LAYERS):
        row: list[Ref] = []
        for i in range(WIDTH):
            deps = [before[i], before[(i + 1) % WIDTH]] if before else []
            row.append(flow.add(tasks.step.job(f"{layer}.{i}"), depends_on=deps))
        before = row
    return flow


async def claim_and_complete(storage: Storage, limit: int) -> int:
    """Claim up to ``limit`` jobs of queue ``wf`` and complete them (each with its id as
    result); how many."""
    claimed = await storage.job_fetch_available(JobFetchAvailableParams("wf", limit, "plans", 30))
    if claimed:
        await storage.job_ack_many(JobAckManyParams(
            [JobAck(j.id, j.lease_token or 0, JobState.COMPLETED, result_json=str(j.id))
             for j in claimed], "plans"))
    return len(claimed)


async def complete_everything(url: str) -> int:
    """Claim and complete every job of queue ``wf`` through the storage (no reads, no
    maintenance: the claims use the fetch index and the acks the primary key, so every
    state-index scan would be a trigger's); the number of jobs completed."""
    storage = create_storage(url, WakeHub())
    await storage.open()
    done, deadline = 0, time.monotonic() + 120
    try:
        while batch := await claim_and_complete(storage, 200):
            assert time.monotonic() < deadline, f"still claiming after {done} jobs"
            done += batch
    finally:
        await storage.close()
    return done


def test_dependents_are_reached_by_id_on_statistics_without_pending_rows(
    pg_wf: tuple[str, WorkflowTasks, datetime], wait_for: WaitFor
) -> None:
    url, tasks, since = pg_wf
    analyze_without_pending_rows(url)
    run = tasks.app.enqueue_workflow(dag(tasks))
    batches = [tasks.app.batch([tasks.step.job(f"b{b}.{m}") for m in range(MEMBERS)],
                               on_success=tasks.step.job(f"b{b}.success"),
                               on_complete=tasks.step.job(f"b{b}.complete"))
               for b in range(BATCHES)]
    tasks.app.close()
    before = published_count(url, SCANS, wait_for, since)
    assert asyncio.run(complete_everything(url)) == LAYERS * WIDTH + BATCHES * (MEMBERS + 2)
    scans = published_count(url, SCANS, wait_for, since) - before
    assert scans == 0, (
        f"{scans} scans of conveyor_jobs_state_idx while completing {LAYERS * WIDTH} workflow"
        f" jobs and {BATCHES} batches: a dependency lookup left the primary key")
    info = tasks.app.get_workflow(run.id)
    assert info is not None and {j.state.value for j in info.jobs} == {"completed"}
    for batch in batches:
        after = tasks.app.get_batch(batch.id)
        assert after is not None and after.finished and after.completed == MEMBERS


FAN_IN = 2000
HISTORY_SEQ_READS = ("SELECT coalesce(sum(seq_tup_read), 0) FROM pg_stat_user_tables"
                     " WHERE relname LIKE 'conveyor_jobs_history%'")


async def complete(url: str, limit: int, archive: bool = False) -> int:
    """Claim and complete up to ``limit`` jobs of queue ``wf``; then, with ``archive``,
    move every finished job to history. The number completed."""
    storage = create_storage(url, WakeHub())
    await storage.open()
    try:
        done = await claim_and_complete(storage, limit)
        if archive:
            await storage.job_archive(JobArchiveParams(after=0, limit=10 * FAN_IN))
        return done
    finally:
        await storage.close()


def test_a_fan_in_reads_archived_results_by_id_on_statistics_of_single_edges(
    pg_wf: tuple[str, WorkflowTasks, datetime], wait_for: WaitFor
) -> None:
    """The release of a fan-in of FAN_IN whose members were archived, on the column
    statistics an earlier load leaves (every job with one dependency; TRUNCATE keeps
    them): each result is read by its id, and no history table is scanned."""
    url, tasks, since = pg_wf
    earlier = Workflow()
    for i in range(500):
        earlier.add(tasks.step.job(f"then.{i}"), depends_on=[earlier.add(tasks.step.job(str(i)))])
    tasks.app.enqueue_workflow(earlier)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE conveyor_job_deps")
    truncate_conveyor_tables(url)
    run = tasks.app.enqueue_workflow(
        chord(group(*(tasks.step.job(str(i)) for i in range(FAN_IN))), tasks.collect))
    tasks.app.close()
    assert asyncio.run(complete(url, FAN_IN - 1, archive=True)) == FAN_IN - 1
    before = published_count(url, HISTORY_SEQ_READS, wait_for, since)
    assert asyncio.run(complete(url, 1)) == 1  # the last member: the release
    reads = published_count(url, HISTORY_SEQ_READS, wait_for, since) - before
    assert reads == 0, f"the release read {reads:,} history rows by scans, not by id"
    callback = tasks.app.get_job(run.jobs[-1].id)
    assert callback is not None and callback.state is JobState.AVAILABLE
    assert callback.kwargs["results"] == [j.id for j in run.jobs[:-1]]
