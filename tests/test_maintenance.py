"""One-off maintenance, API and CLI, on both backends: discard, delete and purge jobs,
prune and rescue now, remove a schedule.

Jobs are claimed as a worker claims them (``job_fetch_available`` on a connection of
its own) to make them running; ages are made old by moving a job's timestamps back in
the real database, so that retention and ``--older-than`` have something to select.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import pty
import re
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result

from conveyor import (
    Conveyor,
    InvalidStateError,
    Job,
    JobNotFoundError,
    JobState,
    StateChange,
    WorkerConfig,
)
from conveyor._runtime.archiver import Archiver
from conveyor._storage import JobAck, JobAckManyParams, JobFetchAvailableParams, JobPurgeParams
from conveyor.cli import cli
from conveyor.cli import maintenance as cli_maintenance

from ._runtime_util import all_final, run_worker_until

ROOT = Path(__file__).resolve().parent.parent
DEAD_PG = "postgresql://postgres@127.0.0.1:1/x"


# -- helpers -----------------------------------------------------------------------------------


def invoke(*args: str, input: str | None = None) -> Result:
    env: dict[str, str | None] = {"CONVEYOR_URL": None, "CONVEYOR_APP": None, "COLUMNS": "200"}
    return CliRunner(env=env).invoke(cli, list(args), input=input, catch_exceptions=False)


def claim(url: str, n: int, *, queue: str = "default", lease: float = 30.0) -> list[Job]:
    """Claim ``n`` jobs as a worker does, on a connection of its own: they are running."""

    async def go() -> list[Job]:
        other = Conveyor(url)
        try:
            storage = await other.storage()
            return await storage.job_fetch_available(
                JobFetchAvailableParams(queue, n, "node-test", lease))
        finally:
            await other.close_async()

    return asyncio.run(go())


def finish(url: str, jobs: list[Job], state: JobState) -> None:
    """Write running jobs' outcome as a worker's acker does (fenced by their lease)."""

    async def go() -> None:
        other = Conveyor(url)
        try:
            storage = await other.storage()
            acks = [JobAck(j.id, j.lease_token or 0, state,
                           error_json='{"error": "x"}' if state is JobState.DISCARDED else None)
                    for j in jobs]
            await storage.job_ack_many(JobAckManyParams(acks))
        finally:
            await other.close_async()

    asyncio.run(go())


async def archive_all(app: Conveyor) -> int:
    """Move every finished job to history now, as the leader's archiver does."""
    return await Archiver(await app.storage(), None, 1.0, after=0.0).run_once()


def hot_count(url: str) -> int:
    """Jobs still in the hot table."""
    if url.startswith("sqlite"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
            return int(conn.execute("SELECT count(*) FROM conveyor_jobs").fetchone()[0])
    with psycopg.connect(url, autocommit=True) as pg:
        row = pg.execute("SELECT count(*) FROM conveyor_jobs").fetchone()
        return int(row[0]) if row else 0


def backdate(url: str, ids: list[int], seconds: float) -> None:
    """Move the jobs' creation and finish ``seconds`` into the past, in the database,
    wherever they are: a worker's archiver may have moved finished ones to history."""
    tables = ("conveyor_jobs", "conveyor_jobs_history")
    if url.startswith("sqlite"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
            for table in tables:
                conn.execute(
                    f"UPDATE {table} SET created_at = created_at - ?, "  # noqa: S608
                    "finished_at = finished_at - ? WHERE id IN (SELECT value FROM json_each(?))",
                    (seconds, seconds, json.dumps(ids)))
        return
    with psycopg.connect(url, autocommit=True) as pg:
        for table in tables:
            pg.execute(
                f"UPDATE {table} SET created_at = created_at - %s * interval '1 second', "  # noqa: S608
                "finished_at = finished_at - %s * interval '1 second' WHERE id = ANY(%s)",
                (seconds, seconds, ids))


def states(app: Conveyor) -> dict[str, int]:
    return {s: n for s, n in app.count_jobs().items() if n}


@pytest.fixture
def events(app: Conveyor) -> list[StateChange]:
    seen: list[StateChange] = []
    app.on_state_change(seen.append)
    return seen


@pytest.fixture
def noop(app: Conveyor) -> Any:
    @app.task
    def noop(n: int = 0) -> None: ...

    return noop


# -- discard one job ----------------------------------------------------------------------------


def test_discard_job_ends_a_waiting_job_with_an_operator_error(
        app: Conveyor, noop: Any, events: list[StateChange]) -> None:
    waiting = noop.enqueue()
    later = noop.options(delay=3600).enqueue()
    done = app.discard_job(waiting.id, reason="customer left")
    assert done.state is JobState.DISCARDED and done.finished_at is not None
    assert done.errors[-1]["error"] == "discarded by an operator: customer left"
    assert app.discard_job(later.id).errors[-1]["error"] == "discarded by an operator"
    assert [(e.job_id, e.previous, e.state, e.source, e.deleted) for e in events[-2:]] == [
        (waiting.id, JobState.AVAILABLE, JobState.DISCARDED, "api", False),
        (later.id, JobState.SCHEDULED, JobState.DISCARDED, "api", False)]
    with pytest.raises(InvalidStateError, match="is discarded and cannot be discarded"):
        app.discard_job(waiting.id)


def test_discard_job_refuses_a_running_job_and_bad_input(app: Conveyor, db_url: str,
                                                         noop: Any) -> None:
    job = noop.enqueue()
    claim(db_url, 1)
    with pytest.raises(InvalidStateError, match=r"running and cannot be discarded: cancel it"):
        app.discard_job(job.id)
    assert app.get_job(job.id).state is JobState.RUNNING  # type: ignore[union-attr]
    with pytest.raises(JobNotFoundError, match="no job with id 424242"):
        app.discard_job(424242)
    for bad in ("1", 0, -3, True, 1.5, None):
        with pytest.raises(TypeError, match="a job id is a positive int"):
            app.discard_job(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="reason must be a str"):
        app.discard_job(job.id, reason=5)  # type: ignore[arg-type]


# -- delete one job -----------------------------------------------------------------------------


def test_delete_job_removes_the_row_and_says_so(app: Conveyor, noop: Any,
                                                events: list[StateChange]) -> None:
    keep, gone = noop.enqueue(1), noop.enqueue(2)
    deleted = app.delete_job(gone.id)
    assert (deleted.id, deleted.state, deleted.args) == (gone.id, JobState.AVAILABLE, [2])
    assert app.get_job(gone.id) is None and app.get_job(keep.id) is not None
    last = events[-1]
    assert (last.job_id, last.state, last.previous, last.deleted) == (
        gone.id, JobState.AVAILABLE, JobState.AVAILABLE, True)
    with pytest.raises(JobNotFoundError, match=f"no job with id {gone.id}"):
        app.delete_job(gone.id)
    with pytest.raises(TypeError):
        app.delete_job(keep.id, force="yes")  # type: ignore[arg-type]


def test_delete_job_refuses_a_running_job_unless_forced(app: Conveyor, db_url: str,
                                                        noop: Any) -> None:
    job = noop.enqueue()
    [running] = claim(db_url, 1)
    with pytest.raises(InvalidStateError, match=r"running and cannot be deleted: cancel it "
                                                r"first .*, or delete it with force"):
        app.delete_job(job.id)
    assert app.get_job(job.id) is not None
    assert app.delete_job(job.id, force=True).state is JobState.RUNNING
    assert app.get_job(job.id) is None
    finish(db_url, [running], JobState.COMPLETED)  # the worker's late outcome: no row
    assert app.get_job(job.id) is None and states(app) == {}


def test_force_deleting_a_job_stops_it_on_its_worker(app: Conveyor) -> None:
    """A real worker: its next heartbeat finds the lease gone and stops the handler."""
    started, stopped = asyncio.Event(), asyncio.Event()

    @app.task
    async def long() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            stopped.set()
            raise

    job = long.enqueue()

    async def during(_: Any) -> None:
        await asyncio.wait_for(started.wait(), 20)
        await app.delete_job_async(job.id, force=True)

    async def main() -> None:
        try:
            await run_worker_until(app, lambda: _is_set(stopped), during=during)
        finally:
            await app.close_async()

    asyncio.run(main())
    assert app.get_job(job.id) is None


async def _is_set(event: asyncio.Event) -> bool:
    return event.is_set()


# -- purge --------------------------------------------------------------------------------------


def test_purge_deletes_in_batches_with_progress_and_never_running_jobs(
        app: Conveyor, db_url: str, noop: Any, events: list[StateChange]) -> None:
    app.enqueue_many([noop.job(i) for i in range(2_505)])
    running = claim(db_url, 5)
    other = Conveyor(db_url)  # a connection of its own sees each batch once committed
    progress: list[tuple[int, int, int]] = []
    try:
        n = app.purge_jobs(states=["available"], batch_size=1000,
                           on_progress=lambda done, total: progress.append(
                               (done, total, other.count_jobs()["available"])))
    finally:
        other.close()
    assert n == 2_500
    # three batches, each committed on its own before the next one started
    assert progress == [(1000, 2500, 1500), (2000, 2500, 500), (2500, 2500, 0)]
    assert states(app) == {"running": 5}
    assert {j.id for j in running} == {j.id for j in app.list_jobs(state="running")}
    deleted = [e for e in events if e.deleted]
    assert len(deleted) == 2_500 and {e.state for e in deleted} == {JobState.AVAILABLE}


def test_purge_filters_default_states_and_dry_run(app: Conveyor, db_url: str,
                                                  noop: Any) -> None:
    @app.task(queue="mail")
    def mail() -> None: ...

    waiting = app.enqueue_many([noop.job(i) for i in range(6)] + [mail.job() for _ in range(3)])
    finish(db_url, claim(db_url, 3), JobState.COMPLETED)
    finish(db_url, claim(db_url, 2), JobState.DISCARDED)
    finish(db_url, claim(db_url, 2, queue="mail"), JobState.COMPLETED)
    assert states(app) == {"available": 2, "completed": 5, "discarded": 2}
    counted: list[dict[str, int]] = []
    assert app.purge_jobs(dry_run=True, on_count=counted.append) == 7
    assert counted == [{"completed": 5, "discarded": 2}]
    assert app.purge_jobs(queue="mail", dry_run=True) == 2
    assert states(app) == {"available": 2, "completed": 5, "discarded": 2}  # nothing gone
    # the default states are the finished ones: waiting jobs stay
    assert app.purge_jobs(queue="default", task="noop", states="completed") == 3
    assert app.purge_jobs(on_count=lambda counts: False) == 0  # declined: nothing deleted
    assert states(app) == {"available": 2, "completed": 2, "discarded": 2}
    assert app.purge_jobs() == 4
    assert states(app) == {"available": 2}
    assert {j.id for j in app.list_jobs()} <= {j.id for j in waiting}


def test_purge_older_than_and_only_what_was_counted(app: Conveyor, db_url: str,
                                                    noop: Any) -> None:
    old = app.enqueue_many([noop.job(i) for i in range(5)])
    young = app.enqueue_many([noop.job(i) for i in range(3)])
    backdate(db_url, [j.id for j in old], 7200)
    assert app.purge_jobs(states="available", older_than=3600, dry_run=True) == 5
    assert app.purge_jobs(states="available", older_than=timedelta(hours=3)) == 0

    async def more(counts: dict[str, int]) -> None:  # matching after the count: spared
        await app.enqueue_many_async([noop.job(9), noop.job(9)])

    assert app.purge_jobs(states="available", on_count=more, batch_size=2) == 8
    assert all(app.get_job(j.id) is None for j in [*old, *young])
    left = app.list_jobs()
    assert len(left) == 2 and min(j.id for j in left) > max(j.id for j in young)


def test_storage_never_purges_or_plainly_deletes_a_running_job(db_url: str) -> None:
    """The statements guard running rows themselves, whatever states a caller names."""
    app = Conveyor(db_url)

    @app.task
    def noop() -> None: ...

    async def main() -> tuple[list[int], Job | None, Job | None]:
        try:
            jobs = await app.enqueue_many_async([noop.job() for _ in range(4)])
            storage = await app.storage()
            [running] = await storage.job_fetch_available(
                JobFetchAvailableParams("default", 1, "node-test", 30.0))
            batch = await storage.job_purge_batch(JobPurgeParams(tuple(JobState), limit=10))
            plain = await storage.job_delete(running.id)
            forced = await storage.job_delete(running.id, force=True)
            assert running.id == jobs[0].id
            return [c.id for c in batch.deleted], plain, forced
        finally:
            await app.close_async()

    try:
        deleted, plain, forced = asyncio.run(main())
    finally:
        app.close()
    assert len(deleted) == 3 and min(deleted) > 1
    assert plain is None and forced is not None and forced.state is JobState.RUNNING


def test_purge_never_deletes_more_than_it_counted(app: Conveyor, db_url: str,
                                                 noop: Any) -> None:
    """A job that finishes during the purge (below the highest id counted) matches too:
    the purge still stops at the number it counted."""
    app.enqueue_many([noop.job(i) for i in range(4)])
    [first, second] = claim(db_url, 2)
    finish(db_url, [second], JobState.COMPLETED)
    finish(db_url, claim(db_url, 2), JobState.COMPLETED)

    async def first_finishes(counts: dict[str, int]) -> None:
        assert counts == {"completed": 3}
        other = Conveyor(db_url)
        try:
            storage = await other.storage()
            ack = JobAck(first.id, first.lease_token or 0, JobState.COMPLETED)
            assert await storage.job_ack_many(JobAckManyParams([ack])) == [first.id]
        finally:
            await other.close_async()

    assert app.purge_jobs(states="completed", on_count=first_finishes) == 3
    assert states(app) == {"completed": 1}


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"states": ["running"]}, ValueError, "running jobs are never purged"),
    ({"states": "running"}, ValueError, "running jobs are never purged"),
    ({"states": ["completed", "nope"]}, ValueError, "unknown state 'nope'; expected one of"),
    ({"states": []}, ValueError, "states is empty"),
    ({"states": [3]}, TypeError, "a state is a JobState or its name"),
    ({"older_than": -1}, ValueError, "older_than must be a finite number of seconds >= 0"),
    ({"older_than": float("nan")}, ValueError, "older_than must be a finite"),
    ({"older_than": timedelta(days=-1)}, ValueError, "older_than must be"),
    ({"older_than": "1d"}, TypeError, "older_than is seconds"),
    ({"batch_size": 0}, ValueError, "batch_size must be an int from 1 to 10000"),
    ({"batch_size": 1.5}, ValueError, "batch_size must be an int"),
    ({"queue": "bad queue!"}, ValueError, "queue"),
    ({"task": ""}, ValueError, "task"),
])
def test_purge_refuses_bad_input_and_deletes_nothing(
        app: Conveyor, noop: Any, kwargs: dict[str, Any], error: type[Exception],
        match: str) -> None:
    noop.enqueue()
    with pytest.raises(error, match=match):
        app.purge_jobs(**kwargs)
    assert states(app) == {"available": 1}


# -- prune and rescue now -----------------------------------------------------------------------


def test_prune_now_runs_retention_as_the_pruner(app: Conveyor, db_url: str) -> None:
    @app.task(max_attempts=1)
    async def work(fail: bool) -> None:
        if fail:
            raise RuntimeError("no")

    jobs = app.enqueue_many([work.job(i % 3 == 0) for i in range(12)])

    async def run() -> None:
        try:
            await run_worker_until(app, all_final(app), WorkerConfig(queues={"default": 4}))
        finally:
            await app.close_async()

    asyncio.run(run())
    assert states(app) == {"completed": 8, "discarded": 4}
    # the worker's archiver may have moved some of them: move them all, as it would
    app.prune_now(completed_retention=86_400 * 365, dry_run=True)  # opens the storage
    hot = hot_count(db_url)
    moved = app._sync(archive_all(app))
    assert moved == hot and hot_count(db_url) == 0
    backdate(db_url, [j.id for j in jobs[:6]], 2 * 86_400)  # 4 completed, 2 discarded
    assert app.prune_now(dry_run=True) == 4  # defaults: completed 1 day, discarded 7 days
    assert app.prune_now(discarded_retention=86_400, dry_run=True) == 6
    assert states(app) == {"completed": 8, "discarded": 4}
    assert app.prune_now(discarded_retention=timedelta(days=1), batch_size=2) == 6
    assert states(app) == {"completed": 4, "discarded": 2}
    backdate(db_url, [j.id for j in jobs], 10)  # finished in the past, not this millisecond
    assert app.prune_now(completed_retention=0, discarded_retention=0) == 6
    assert states(app) == {}
    with pytest.raises(ValueError, match="completed_retention must be"):
        app.prune_now(completed_retention=-5)


def test_prune_now_keeps_a_queues_own_retention(app: Conveyor, db_url: str,
                                                noop: Any) -> None:
    """A queue with a retention of its own keeps it, as with the pruner service, unless
    the call names a retention; the dry run counts the same passes."""
    kept = app.enqueue_many([noop.options(queue="audit").job(i) for i in range(3)])
    plain = app.enqueue_many([noop.job(i) for i in range(2)])
    finish(db_url, claim(db_url, 3, queue="audit"), JobState.COMPLETED)
    finish(db_url, claim(db_url, 2), JobState.COMPLETED)
    backdate(db_url, [j.id for j in kept + plain], 2 * 86_400)  # past the 1-day default
    app.set_queue_retention("audit", completed=7 * 86_400)
    assert app.prune_now(dry_run=True) == 2
    assert app.prune_now() == 2
    assert states(app) == {"completed": 3}
    assert app.prune_now(completed_retention=86_400) == 3  # named here: every queue
    assert states(app) == {}


def test_rescue_now_returns_expired_leases_to_their_queue(
        app: Conveyor, db_url: str, noop: Any, events: list[StateChange]) -> None:
    jobs = app.enqueue_many([noop.job(i) for i in range(3)])
    last = noop.options(max_attempts=1).enqueue()
    healthy = noop.enqueue()
    claim(db_url, 4, lease=0.2)
    claim(db_url, 1, lease=300)
    deadline = time.monotonic() + 20
    while len(expired := app.rescue_now(dry_run=True)) < 4:
        assert time.monotonic() < deadline, expired
        time.sleep(0.05)
    assert [j.id for j in expired] == [*(j.id for j in jobs), last.id]
    assert {j.state for j in expired} == {JobState.RUNNING}  # a dry run changes nothing
    assert states(app) == {"running": 5}
    rescued = app.rescue_now()
    assert {j.id: j.state for j in rescued} == {
        **{j.id: JobState.AVAILABLE for j in jobs}, last.id: JobState.DISCARDED}
    assert "lease expired" in rescued[0].errors[-1]["error"]
    assert app.get_job(healthy.id).state is JobState.RUNNING  # type: ignore[union-attr]
    assert {(e.job_id, e.previous) for e in events if e.source == "api"} >= {
        (j.id, JobState.RUNNING) for j in rescued}
    assert app.rescue_now() == [] and app.rescue_now(dry_run=True) == []
    with pytest.raises(ValueError, match="limit"):
        app.rescue_now(limit=0)


# -- the CLI ------------------------------------------------------------------------------------


def test_cli_discard_and_delete(app: Conveyor, db_url: str, noop: Any) -> None:
    a, b, c = noop.enqueue(1), noop.enqueue(2), noop.enqueue(3)
    done = invoke("jobs", "discard", str(a.id), "--reason", "spam", "--json", "--url", db_url)
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["state"] == "discarded"
    again = invoke("jobs", "discard", str(a.id), "--url", db_url)
    assert again.exit_code == 1
    assert "is discarded and cannot be discarded" in again.stderr
    [running] = claim(db_url, 1)
    assert running.id == b.id
    refused = invoke("jobs", "delete", str(running.id), "--url", db_url)
    assert refused.exit_code == 1 and "cancel it first" in refused.stderr
    refused = invoke("jobs", "discard", str(running.id), "--url", db_url)
    assert refused.exit_code == 1 and "running and cannot be discarded" in refused.stderr
    forced = invoke("jobs", "delete", str(running.id), "--force", "--url", db_url)
    assert forced.exit_code == 0 and "was running" in forced.stdout
    ok = invoke("jobs", "delete", str(c.id), "--json", "--url", db_url)
    assert json.loads(ok.stdout) == {"deleted": c.id, "task": "noop", "queue": "default",
                                     "state": "available"}
    missing = invoke("jobs", "delete", "424242", "--url", db_url)
    assert missing.exit_code == 1 and "no job with id 424242" in missing.stderr
    for bad in ("0", "abc", "-1", str(2**63)):
        assert invoke("jobs", "delete", bad, "--url", db_url).exit_code == 2, bad
        assert invoke("jobs", "discard", bad, "--url", db_url).exit_code == 2, bad
    assert [j.id for j in app.list_jobs()] == [a.id]


def test_cli_purge_counts_confirms_and_reports_progress(app: Conveyor, db_url: str,
                                                        noop: Any) -> None:
    app.enqueue_many([noop.job(i) for i in range(2_505)])
    claim(db_url, 5)
    purge = ("jobs", "purge", "--state", "available", "--url", db_url)
    dry = invoke(*purge, "--dry-run")
    assert dry.exit_code == 0 and "2500 job(s) (2500 available) match" in dry.stdout
    no_tty = invoke(*purge)  # no terminal to confirm on, no --yes
    assert no_tty.exit_code == 2
    assert "refusing to purge 2500 job(s) without confirmation" in no_tty.stderr
    assert states(app) == {"available": 2500, "running": 5}
    yes = invoke(*purge, "--yes")
    assert yes.exit_code == 0, yes.stderr
    lines = [line for line in yes.stderr.splitlines() if line.startswith("purged")]
    assert lines == ["purged 1000 of 2500", "purged 2000 of 2500", "purged 2500 of 2500"]
    assert "deleted 2500 job(s)" in yes.stdout
    assert states(app) == {"running": 5}


def test_cli_purge_asks_on_a_terminal(app: Conveyor, db_url: str, noop: Any,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_maintenance, "_interactive", lambda: True)
    app.enqueue_many([noop.job(i) for i in range(3)])
    purge = ("jobs", "purge", "--state", "available", "--url", db_url)
    declined = invoke(*purge, input="n\n")
    assert declined.exit_code == 1 and "Delete these 3 job(s)?" in declined.stderr
    assert states(app) == {"available": 3}
    accepted = invoke(*purge, "--json", input="y\n")
    assert accepted.exit_code == 0, accepted.stderr
    doc = json.loads(accepted.stdout)
    assert doc == {"dry_run": False, "matched": {"available": 3}, "deleted": 3}
    assert states(app) == {}


def test_cli_purge_confirms_on_a_real_terminal(app: Conveyor, db_url: str, noop: Any,
                                              tmp_path: Path) -> None:
    """`python -m conveyor` with its stdin on a pseudo-terminal: it asks, and obeys."""
    app.enqueue_many([noop.job(i) for i in range(3)])
    env = {k: v for k, v in os.environ.items() if k not in ("CONVEYOR_URL", "CONVEYOR_APP")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    for answer, left in ((b"n\n", 3), (b"y\n", 0)):
        leader, follower = pty.openpty()
        try:
            os.write(leader, answer)  # waits in the terminal until the prompt reads it
            proc = subprocess.run(
                [sys.executable, "-m", "conveyor", "jobs", "purge", "--state", "available",
                 "--url", db_url], stdin=follower, capture_output=True, text=True,
                cwd=tmp_path, env=env, timeout=90, check=False)
        finally:
            os.close(leader)
            os.close(follower)
        assert "Delete these 3 job(s)? This cannot be undone [y/N]" in proc.stderr
        assert proc.returncode == (1 if left else 0), proc.stderr
        assert app.count_jobs()["available"] == left


@pytest.mark.parametrize(("args", "message"), [
    ([], "give at least one filter"),
    (["--state", "running"], "running jobs are never purged"),
    (["--state", "weird"], "'weird' is not one of"),
    (["--older-than", "-1d"], "is not a duration"),
    (["--older-than", "3x"], "is not a duration"),
    (["--older-than", "1d2"], "is not a duration"),
    (["--queue", "bad queue!"], "queue"),
    (["--state", "completed", "--batch-size", "0"], "batch-size"),
])
def test_cli_purge_bad_input_exits_2(app: Conveyor, db_url: str, noop: Any, args: list[str],
                                     message: str) -> None:
    noop.enqueue()
    result = invoke("jobs", "purge", *args, "--yes", "--url", db_url)
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr
    assert states(app) == {"available": 1}


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90), ("1.5", 1.5), ("90s", 90), ("15m", 900), ("12h", 43_200), ("7d", 604_800),
    ("2w", 1_209_600), ("1d12h", 129_600), ("0", 0)])
def test_durations(text: str, seconds: float) -> None:
    assert cli_maintenance.DURATION.convert(text, None, None) == seconds
    assert cli_maintenance.DURATION.convert(cli_maintenance.human(seconds), None, None) == seconds


def test_cli_prune_and_rescue(app: Conveyor, db_url: str, noop: Any) -> None:
    jobs = app.enqueue_many([noop.job(i) for i in range(4)])
    finish(db_url, claim(db_url, 2), JobState.COMPLETED)
    claim(db_url, 1, lease=0.01)
    backdate(db_url, [j.id for j in jobs[:2]], 3 * 86_400)
    dry = invoke("prune", "--dry-run", "--json", "--url", db_url)
    assert json.loads(dry.stdout) == {"dry_run": True, "would_delete": 2}
    assert invoke("prune", "--completed-retention", "4d", "--url", db_url).stdout == (
        "deleted 0 old finished job(s)\n")
    assert invoke("prune", "--completed-retention", "2d", "--url", db_url).stdout == (
        "deleted 2 old finished job(s)\n")
    deadline = time.monotonic() + 20
    while not app.rescue_now(dry_run=True):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    table = invoke("rescue", "--dry-run", "--url", db_url)
    assert table.exit_code == 0
    assert "would rescue 1 job(s)" in table.stdout and "node-test" in table.stdout
    assert "available" in table.stdout  # what it becomes
    assert states(app) == {"available": 1, "running": 1}
    done = json.loads(invoke("rescue", "--json", "--url", db_url).stdout)
    assert done["count"] == 1 and done["jobs"][0]["state"] == "available"
    assert done["jobs"][0]["node"] == "node-test"
    assert states(app) == {"available": 2}
    assert "--dry-run" in invoke("prune", "--help").stdout
    assert "Exit codes:" in invoke("rescue", "--help").stdout


def test_cli_schedules_remove(app: Conveyor, db_url: str, noop: Any, tmp_path: Path,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    app.add_schedule("nightly", cron="0 3 * * *", task=noop)
    removed = invoke("schedules", "remove", "nightly", "--url", db_url)
    assert removed.exit_code == 0 and "schedule nightly: removed" in removed.stdout
    assert app.list_schedules() == []
    missing = invoke("schedules", "remove", "nightly", "--url", db_url)
    assert missing.exit_code == 1 and "no schedule named 'nightly'" in missing.stderr
    (tmp_path / "periodic_app_for_maint.py").write_text(
        "from conveyor import Conveyor\n"
        "app = Conveyor()\n"
        "@app.periodic(cron='* * * * *')\n"
        "def tick() -> None: ...\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    app.add_schedule("tick", cron="* * * * *", task="tick")
    in_code = invoke("schedules", "remove", "tick", "--app", "periodic_app_for_maint:app",
                     "--url", db_url)
    assert in_code.exit_code == 1 and "defined in code" in in_code.stderr
    assert [s.row.name for s in app.list_schedules()] == ["tick"]
    sys.modules.pop("periodic_app_for_maint", None)


@pytest.mark.parametrize("command", [
    ["prune"], ["rescue", "--dry-run"], ["jobs", "discard", "1"], ["jobs", "delete", "1"],
    ["jobs", "purge", "--state", "completed", "--yes"], ["schedules", "remove", "x"],
])
def test_dead_database_exits_3_with_one_line(command: list[str]) -> None:
    result = invoke(*command, "--url", DEAD_PG)
    assert result.exit_code == 3, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: database unavailable")


def test_help_texts_document_exit_codes() -> None:
    for command in (["prune"], ["rescue"], ["jobs", "discard"], ["jobs", "delete"],
                    ["jobs", "purge"], ["schedules", "remove"]):
        result = invoke(*command, "--help")
        assert result.exit_code == 0 and "Exit codes:" in result.stdout, command
    assert "Running jobs are never purged" in invoke("jobs", "purge", "--help").stdout


# -- layering ----------------------------------------------------------------------------------


@pytest.mark.parametrize("module", ["maintenance.py", "schedules.py", "jobs.py"])
def test_the_commands_call_only_the_app(module: str) -> None:
    """Not storage, not the choke point, not SQL: the app's methods only."""
    tree = ast.parse((ROOT / "src" / "conveyor" / "cli" / module).read_text())
    imported = {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not {m for m in imported if m.lstrip(".").startswith(("_storage", "_observed"))}


# -- the dashboard's Delete action --------------------------------------------------------------


def test_dashboard_deletes_a_job_but_not_a_running_one(app: Conveyor, db_url: str, noop: Any,
                                                       events: list[StateChange]) -> None:
    import warnings

    from conveyor.web import create_app

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    waiting, busy = noop.enqueue(1), noop.enqueue(2)
    claim(db_url, 2)  # both running
    extra = noop.enqueue(3)
    base = "http://localhost"
    sent = {"origin": base, "sec-fetch-site": "same-origin"}
    with TestClient(create_app(app), base_url=base) as client:
        page = client.get(f"/jobs/{extra.id}").text
        assert f'action="/jobs/{extra.id}/delete"' in page
        assert f'action="/jobs/{busy.id}/delete"' not in client.get(f"/jobs/{busy.id}").text
        token = re.search(r'name="csrf_token" (?:value|content)="([0-9a-f]{64})"', page)
        assert token
        forged = client.post(f"/jobs/{extra.id}/delete", data={"csrf_token": "0" * 64},
                             headers=sent, follow_redirects=False)
        assert forged.status_code == 403 and app.get_job(extra.id) is not None
        done = client.post(f"/jobs/{extra.id}/delete", data={"csrf_token": token.group(1)},
                           headers=sent, follow_redirects=False)
        assert done.status_code == 303 and done.headers["location"] == "/jobs"
        assert app.get_job(extra.id) is None
        assert f"Job {extra.id} was deleted." in client.get("/jobs").text
        refused = client.post(f"/jobs/{busy.id}/delete", data={"csrf_token": token.group(1)},
                              headers=sent, follow_redirects=False)
        assert refused.status_code == 303
        assert "is running and cannot be deleted" in client.get(f"/jobs/{busy.id}").text
    assert app.get_job(busy.id) is not None and app.get_job(waiting.id) is not None
    assert [(e.job_id, e.source, e.deleted) for e in events if e.deleted] == [
        (extra.id, "dashboard", True)]
