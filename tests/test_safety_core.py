"""Issue 11, the core's share: a handler's BaseException is its failure; a full disk is a
Conveyor error; enqueue refuses empty queue names and unreachable times; each attempt
records its worker and run time; the Quickstart ends silently."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import conveyor
from conveyor import Conveyor, JobState, WorkerConfig

from ._runtime_util import all_final, run_worker_until

ROOT = Path(__file__).resolve().parent.parent
#: The source tree of the conveyor under test, for the subprocesses.
SRC = Path(conveyor.__file__).resolve().parents[1]


class CustomBase(BaseException):
    """A BaseException that is neither an Exception nor one of Python's own."""


BASE_EXCEPTIONS: list[tuple[type[BaseException], str]] = [
    (SystemExit, "SystemExit: 3"),
    (KeyboardInterrupt, "KeyboardInterrupt: pressed"),
    (GeneratorExit, "GeneratorExit: closed"),
    (CustomBase, "CustomBase: mine"),
]


def _make(kind: type[BaseException]) -> BaseException:
    arg = {SystemExit: 3, KeyboardInterrupt: "pressed", GeneratorExit: "closed"}.get(kind, "mine")
    return kind(arg)


@pytest.mark.parametrize("is_async", [True, False], ids=["async", "sync"])
def test_a_handlers_base_exception_is_its_failure_and_the_worker_goes_on(
        app: Conveyor, is_async: bool) -> None:
    """SystemExit, KeyboardInterrupt, GeneratorExit and a custom BaseException raised by a
    handler fail its attempt at once (recorded as themselves, retried, then discarded),
    and the same worker goes on to run the other jobs."""
    if is_async:
        @app.task(name="boom", max_attempts=2, backoff=0)
        async def boom(kind: int) -> None:
            raise _make(BASE_EXCEPTIONS[kind][0])
    else:
        @app.task(name="boom", max_attempts=2, backoff=0)
        def boom(kind: int) -> None:
            raise _make(BASE_EXCEPTIONS[kind][0])

    @app.task
    async def fine(n: int) -> int:
        return n

    async def main() -> None:
        bad = [await boom.enqueue_async(i) for i in range(len(BASE_EXCEPTIONS))]
        good = [await fine.enqueue_async(n) for n in range(5)]
        # lease_ttl 60 s: a job left running would only come back after the test's deadline
        config = WorkerConfig(queues={"default": 4}, lease_ttl=60.0, heartbeat_interval=0.1,
                              stage_interval=0.05, shutdown_timeout=5.0)
        await run_worker_until(app, all_final(app), config=config, timeout=20)
        for job, (kind, message) in zip(bad, BASE_EXCEPTIONS, strict=True):
            final = await app.get_job_async(job.id)
            assert final is not None and final.state == JobState.DISCARDED, kind
            assert final.attempt == 2 and len(final.errors) == 2
            assert [e["error"] for e in final.errors] == [message, message]
            assert "lease expired" not in str(final.errors)
            assert kind.__name__ in final.errors[0]["traceback"]
        for n, job in enumerate(good):
            done = await app.get_job_async(job.id)
            assert done is not None and done.state == JobState.COMPLETED and done.result == n
        await app.close_async()

    asyncio.run(main())


def test_run_worker_burst_survives_a_handler_raising_keyboard_interrupt(app: Conveyor) -> None:
    """``app.run_worker(burst)``: a KeyboardInterrupt from a handler does not stop the
    worker nor escape it; a real interrupt still would (tests/test_acceptance.py)."""

    @app.task(max_attempts=1)
    async def interrupted() -> None:
        raise KeyboardInterrupt

    @app.task(max_attempts=1)
    def exits() -> None:
        sys.exit("bye")

    @app.task
    def after() -> str:
        return "ran"

    async def main() -> None:
        a = await interrupted.enqueue_async()
        b = await exits.enqueue_async()
        c = await after.enqueue_async()
        await asyncio.wait_for(app.run_worker(config=WorkerConfig(
            queues={"default": 1}, burst=True, stage_interval=0.05)), timeout=30)
        ja, jb, jc = [await app.get_job_async(j.id) for j in (a, b, c)]
        assert ja is not None and ja.state == JobState.DISCARDED
        assert ja.errors[-1]["error"] == "KeyboardInterrupt: "
        assert jb is not None and jb.state == JobState.DISCARDED
        assert jb.errors[-1]["error"] == "SystemExit: bye"
        assert jc is not None and jc.state == JobState.COMPLETED and jc.result == "ran"
        await app.close_async()

    asyncio.run(main())


def test_a_handlers_own_cancelled_error_is_a_failure_but_cancel_job_still_cancels(
        app: Conveyor) -> None:
    @app.task(max_attempts=1)
    async def own_cancel() -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.cancel()
        await fut  # raises CancelledError, which nobody asked this task for

    @app.task
    async def slow() -> None:
        await asyncio.sleep(60)

    async def main() -> None:
        own = await own_cancel.enqueue_async()
        long = await slow.enqueue_async()

        async def cancel_when_running(worker: Any) -> None:
            for _ in range(2000):
                job = await app.get_job_async(long.id)
                if job is not None and job.state == JobState.RUNNING:
                    break
                await asyncio.sleep(0.01)
            await app.cancel_job_async(long.id)

        await run_worker_until(app, all_final(app), during=cancel_when_running)
        a, b = await app.get_job_async(own.id), await app.get_job_async(long.id)
        assert a is not None and a.state == JobState.DISCARDED
        assert a.errors[-1]["error"].startswith("CancelledError")
        assert b is not None and b.state == JobState.CANCELLED
        assert "cancelled while running" in b.errors[-1]["error"]
        await app.close_async()

    asyncio.run(main())


def test_conveyor_worker_process_survives_sys_exit_in_a_sync_handler(
        db_url: str, tmp_path: Path) -> None:
    """A real ``conveyor worker --burst``: a sync handler calling sys.exit() fails its
    job, the process runs the next job and exits 0 when the queue is empty."""
    (tmp_path / "exiting_tasks.py").write_text(textwrap.dedent("""
        import sys
        from conveyor import Conveyor

        app = Conveyor()

        @app.task(max_attempts=1)
        def quits():
            sys.exit(7)

        @app.task
        def works():
            return "ok"
    """))
    env = {**os.environ, "CONVEYOR_URL": db_url, "PYTHONPATH": str(SRC)}
    app = Conveyor(db_url)
    try:
        q = app.task(name="quits", max_attempts=1)(lambda: None).enqueue()
        w = app.task(name="works")(lambda: None).enqueue()
        proc = subprocess.run(
            [sys.executable, "-m", "conveyor", "worker", "exiting_tasks:app", "--burst",
             "--log-level", "warning"],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        jq, jw = app.get_job(q.id), app.get_job(w.id)
        assert jq is not None and jq.state == JobState.DISCARDED
        assert jq.errors[-1]["error"] == "SystemExit: 7"
        assert jw is not None and jw.state == JobState.COMPLETED and jw.result == "ok"
    finally:
        app.close()




# -- 3. validation at enqueue ----------------------------------------------------------------


def test_an_empty_queue_name_is_refused_everywhere(app: Conveyor) -> None:
    @app.task
    def work() -> None: ...

    with pytest.raises(ValueError, match="queue name is empty"):
        work.options(queue="").enqueue()
    with pytest.raises(ValueError, match="queue name is empty"):
        app.enqueue_many([work.options(queue="").job()])
    with pytest.raises(ValueError, match="queue name is empty"):
        app.task(name="other", queue="")(lambda: None)
    with pytest.raises(ValueError, match="queue name is empty"):
        app.count_jobs(queue="")
    with pytest.raises(ValueError, match="queue name is empty"):
        app.list_jobs(queue="")
    assert sum(app.count_jobs().values()) == 0  # nothing went to "default"


@pytest.mark.parametrize("delay", [1e20, float("inf"), float("nan"), -1, -0.5, 3.2e9])
def test_an_unreachable_delay_is_refused_naming_the_limit(app: Conveyor, delay: float) -> None:
    @app.task
    def work() -> None: ...

    with pytest.raises(ValueError, match="100 years"):
        work.options(delay=delay).enqueue()
    with pytest.raises(ValueError, match="100 years"):
        app.enqueue_many([work.job(), work.options(delay=delay).job()])
    assert sum(app.count_jobs().values()) == 0


def test_run_at_too_far_ahead_is_refused_and_the_limit_itself_is_accepted(app: Conveyor) -> None:
    from datetime import UTC, datetime, timedelta

    from conveyor._payload import MAX_DELAY_SECONDS

    @app.task
    def work() -> None: ...

    for far in (datetime.max.replace(tzinfo=UTC), datetime.now(UTC) + timedelta(days=365 * 101)):
        with pytest.raises(ValueError, match="100 years"):
            work.options(run_at=far).enqueue()
    # the largest delay is stored and read back on both backends
    job = work.options(delay=MAX_DELAY_SECONDS - 60).enqueue()
    read = app.get_job(job.id)
    assert read is not None and read.state == JobState.SCHEDULED
    assert read.scheduled_at.year >= 2120
    soon = work.options(run_at=datetime.now(UTC) + timedelta(days=30)).enqueue()
    assert soon.state == JobState.SCHEDULED


# -- 2. a full disk ----------------------------------------------------------------------------


def test_a_full_sqlite_disk_is_a_conveyor_error_and_nothing_is_half_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLITE_FULL for real: every connection of the storage gets ``PRAGMA
    max_page_count`` a few pages above the file's size (SQLite's own size limit)."""
    import functools
    import sqlite3

    from conveyor import ConveyorError, StorageFullError
    from conveyor._storage import sqlite as sqlite_backend

    path = tmp_path / "full.db"
    url = f"sqlite:///{path}"
    first = Conveyor(url)
    work = first.task(name="work")(lambda blob: None)
    earlier = first.enqueue_many([work.job(f"earlier {i}") for i in range(20)])
    first.close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
    monkeypatch.setattr(sqlite_backend, "SQLiteConfig", functools.partial(
        sqlite_backend.SQLiteConfig, max_page_count=pages + 4))

    app = Conveyor(url)
    try:
        big = app.task(name="work")(lambda blob: None)
        specs = [big.job("x" * 2000) for _ in range(500)]  # about 1 MB: far over 4 pages
        # the portal's storage thread, then the sync API's own connection, then async
        for attempt in (app.enqueue_many, app.enqueue_many, _async_enqueue_many(app)):
            with pytest.raises(StorageFullError) as info:
                attempt(specs)
            assert isinstance(info.value, ConveyorError)
            assert "the database disk is full" in str(info.value)
            assert str(path) in str(info.value) and "nothing was written" in str(info.value)
            assert not isinstance(info.value.__cause__, StorageFullError)
            assert app.count_jobs()["available"] == 20  # nothing half-written
        for job in earlier:
            kept = app.get_job(job.id)
            assert kept is not None and kept.args == job.args
    finally:
        app.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT count(*) FROM conveyor_jobs").fetchone()[0] == 20


def _async_enqueue_many(app: Conveyor) -> Any:
    def run(specs: Any) -> Any:
        return app._sync(app.enqueue_many_async(specs))
    return run


@pytest.mark.postgres
def test_postgres_disk_full_sqlstate_is_the_same_conveyor_error(postgres_db_url: str) -> None:
    """SQLSTATE 53100 (disk_full), raised by the server inside the insert (a trigger),
    becomes StorageFullError with the URL (no password) and nothing is written."""
    import psycopg

    from conveyor import StorageFullError
    from tests.conftest import truncate_conveyor_tables

    truncate_conveyor_tables(postgres_db_url)
    app = Conveyor(postgres_db_url)
    work = app.task(name="work")(lambda n: None)
    earlier = app.enqueue_many([work.job(i) for i in range(5)])
    with psycopg.connect(postgres_db_url, autocommit=True) as conn:
        conn.execute("""
            CREATE FUNCTION conveyor_test_disk_full() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.args::text LIKE '%full%' THEN
                    RAISE EXCEPTION 'could not extend file: No space left on device'
                        USING ERRCODE = 'disk_full';
                END IF;
                RETURN NEW;
            END $$""")
        conn.execute("CREATE TRIGGER conveyor_test_disk_full BEFORE INSERT ON conveyor_jobs"
                      " FOR EACH ROW EXECUTE FUNCTION conveyor_test_disk_full()")
    try:
        batch = [work.job(f"ok {i}") for i in range(10)] + [work.job("full")]
        for attempt in (app.enqueue_many, _async_enqueue_many(app),
                        lambda specs: app.enqueue_many(specs[-1:])):
            with pytest.raises(StorageFullError, match=r"the database disk is full \(postgresql://"
                               r".*\): nothing was written"):
                attempt(batch)
            assert sum(app.count_jobs().values()) == 5
        assert [j.args for j in app.list_jobs()] == [j.args for j in reversed(earlier)]
    finally:
        with psycopg.connect(postgres_db_url, autocommit=True) as conn:
            conn.execute("DROP TRIGGER conveyor_test_disk_full ON conveyor_jobs")
            conn.execute("DROP FUNCTION conveyor_test_disk_full()")
        app.close()


# -- 5. the Quickstart ends silently -----------------------------------------------------------


def _readme_quickstart() -> str:
    """The README's Quickstart script, exactly as a new user copies it."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Quickstart"):]
    start = section.index("```python\n") + len("```python\n")
    return section[start:section.index("```", start)]


@pytest.mark.parametrize("dev_mode", [False, True], ids=["plain", "devmode"])
def test_the_readme_quickstart_runs_silently_and_enqueues_its_jobs(
        db_url: str, tmp_path: Path, dev_mode: bool) -> None:
    """``python tasks.py`` (sync API, never calls close()) against $CONVEYOR_URL: exit 0,
    nothing on stderr (no asyncio warnings on PostgreSQL), all 1,002 jobs written."""
    script = _readme_quickstart()
    assert "app = Conveyor()" in script and "close()" not in script
    (tmp_path / "tasks.py").write_text(script)
    env = {**os.environ, "CONVEYOR_URL": db_url, "PYTHONPATH": str(SRC)}
    env.pop("PYTHONDEVMODE", None)
    if dev_mode:
        env["PYTHONDEVMODE"] = env["PYTHONASYNCIODEBUG"] = "1"
    done = subprocess.run([sys.executable, "tasks.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    check = Conveyor(db_url)
    try:
        counts = check.count_jobs()
        assert counts["available"] == 1001 and counts["scheduled"] == 1
        assert {j.task for j in check.list_jobs(queue="mail")} == {"send_email"}
    finally:
        check.close()


# -- 4. which worker ran each attempt, and for how long ------------------------------------------


def test_each_attempt_records_its_worker_and_run_time_and_the_job_page_shows_them(
        app: Conveyor) -> None:
    import socket
    import time
    import warnings

    from conveyor import current_job

    @app.task(backoff=0)
    def flaky() -> str:
        if current_job().attempt == 1:
            time.sleep(0.05)
            raise RuntimeError("first attempt fails")
        time.sleep(0.12)
        return "done"

    async def main() -> str:
        job = await flaky.enqueue_async()
        worker = await run_worker_until(app, all_final(app))
        final = await app.get_job_async(job.id)
        assert final is not None and final.state == JobState.COMPLETED and final.attempt == 2
        [error] = final.errors
        assert error["node"] == worker.node_id
        assert error["host"] == socket.gethostname() and error["pid"] == os.getpid()
        assert 0.05 <= error["run_time"] < 5
        assert final.ran_on == worker.node_id
        assert final.run_time is not None and 0.12 <= final.run_time < 5
        assert final.to_dict()["ran_on"] == worker.node_id  # the CLI's --json
        await app.close_async()
        return worker.node_id

    node = asyncio.run(main())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    from conveyor.web import create_app

    with TestClient(create_app(app), base_url="http://localhost") as client:
        page = client.get("/jobs/1").text
    assert '<dt>last run</dt><dd id="job-last-run">attempt 2 ran ' in page
    assert page.count(f"node {node}") >= 3  # last run, both attempts, the timeline
    assert "RuntimeError: first attempt fails" in page
    assert "attempt 2 ran" in page and "attempt-completed" in page and "attempt-failed" in page
    assert f"on {socket.gethostname()} (pid {os.getpid()})" in page


def test_a_failed_attempt_without_runner_fields_still_renders(app: Conveyor) -> None:
    """Error entries written before schema 6 (no node, host, pid, run_time)."""
    from datetime import UTC, datetime

    from conveyor._app.reads import attempt_runs, timeline

    @app.task
    def old() -> None: ...

    job = old.enqueue()
    legacy = {"attempt": 1, "at": datetime.now(UTC).isoformat(), "error": "ValueError: x"}
    import dataclasses
    shown = dataclasses.replace(job, errors=[legacy], attempt=1, state=JobState.RETRYABLE)
    [run] = attempt_runs(shown, {})
    assert run.runner == "" and run.run_time is None and run.error == "ValueError: x"
    assert any(e.what == "attempt 1 ended" for e in timeline(shown))
