"""The test infrastructure itself: backends, isolation, Postgres discovery, waiting."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import NoReturn

import psycopg
import pytest

from conveyor import Conveyor, JobState

from . import _pg
from .conftest import PG_MISSING, WaitFor, WaitForAsync, truncate_conveyor_tables


def test_app_enqueues_and_reads_back(app: Conveyor, db_url: str) -> None:
    @app.task(queue="infra")
    def add(a: int, b: int) -> int:
        return a + b

    jobs = app.enqueue_many([add.job(1, 2), add.job(3, b=4)])
    single = add.enqueue(5, 6)

    assert [j.args for j in jobs] == [[1, 2], [3]]
    assert jobs[1].kwargs == {"b": 4}
    for job in [*jobs, single]:
        stored = app.get_job(job.id)
        assert stored is not None
        assert (stored.id, stored.task, stored.queue) == (job.id, "add", "infra")
        assert stored.state == JobState.AVAILABLE
    assert app.count_jobs()["available"] == 3


def test_db_url_matches_backend(db_url: str, request: pytest.FixtureRequest) -> None:
    backend = request.node.callspec.params["db_url"]
    assert request.node.get_closest_marker(backend) is not None
    if backend == "sqlite":
        assert db_url.startswith("sqlite:////"), "an absolute path in a fresh tmp_path"
    else:
        assert db_url.startswith(("postgresql://", "postgres://"))
        assert "/conveyor_test_" in db_url


def _insert_one_and_check_alone(app: Conveyor) -> None:
    @app.task
    def noop() -> None: ...

    job = noop.enqueue()
    assert job.id == 1, "identities restart in every test"
    assert sum(app.count_jobs().values()) == 1, "the database was not empty"


# Two identical tests: whichever runs second proves the first one's row was cleared.
def test_database_is_empty_at_start_a(app: Conveyor) -> None:
    _insert_one_and_check_alone(app)


def test_database_is_empty_at_start_b(app: Conveyor) -> None:
    _insert_one_and_check_alone(app)


def test_postgres_database_is_migrated_and_truncatable(postgres_db_url: str) -> None:
    with psycopg.connect(postgres_db_url, autocommit=True) as conn:
        names = {
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            )
        }
        assert {"conveyor_jobs", "conveyor_nodes"} <= names
        conn.execute("INSERT INTO conveyor_nodes (id, hostname, pid) VALUES ('infra-node', 'h', 1)")
    truncate_conveyor_tables(postgres_db_url)
    with psycopg.connect(postgres_db_url) as conn:
        row = conn.execute("SELECT count(*) FROM conveyor_nodes").fetchone()
    assert row == (0,)


def test_discovery_finds_postgres_here(postgres_admin_url: str) -> None:
    found = _pg.get()
    assert found.admin_url == postgres_admin_url
    _pg.check_admin(postgres_admin_url)  # reachable and may create databases


def test_explicit_bad_url_is_an_error_not_a_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_pg.ENV_URL, "postgresql://nobody@127.0.0.1:1/x")
    found = _pg.discover()
    assert found.admin_url is None
    assert found.fatal
    assert "CONVEYOR_TEST_POSTGRES_URL" in found.reason


def test_explicit_skip_disables_postgres(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_pg.ENV_URL, "skip")
    found = _pg.discover()
    assert (found.admin_url, found.fatal) == (None, False)


def test_url_helpers() -> None:
    url = "postgresql://u:secret@h:5433/postgres?sslmode=disable"
    assert _pg.redact(url) == "postgresql://u:***@h:5433/postgres?sslmode=disable"
    assert _pg.with_database(url, "conveyor_test_x") == (
        "postgresql://u:secret@h:5433/conveyor_test_x?sslmode=disable"
    )


def _skip_unless_required(reason: str) -> NoReturn:
    """Skip, or fail when ``CONVEYOR_REQUIRE_POSTGRES`` says Postgres must be tested."""
    message = f"{PG_MISSING} {reason}"
    if _pg.required():
        pytest.fail(f"{message} ({_pg.ENV_REQUIRE} is set)", pytrace=False)
    pytest.skip(message)


def test_skip_unless_required_fails_when_postgres_is_required(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_pg.ENV_REQUIRE, "1")
    with pytest.raises(pytest.fail.Exception, match=_pg.ENV_REQUIRE):
        _skip_unless_required("no server")
    monkeypatch.setenv(_pg.ENV_REQUIRE, "0")
    with pytest.raises(pytest.skip.Exception, match="no server"):
        _skip_unless_required("no server")


@pytest.mark.slow
@pytest.mark.postgres
def test_throwaway_cluster_starts_and_is_removed() -> None:
    if os.environ.get(_pg.ENV_URL, "").strip().lower() in _pg.DISABLED_VALUES:
        _skip_unless_required(f"Postgres disabled by {_pg.ENV_URL}")
    try:
        url, cluster = _pg.start_throwaway()
    except _pg.PostgresUnavailable as exc:
        _skip_unless_required(f"cannot start a throwaway cluster here: {exc}")
    try:
        tmpdir = cluster.tmpdir
        assert tmpdir is not None and tmpdir.is_dir()
        _pg.check_admin(url)
    finally:
        cluster.stop()
    assert not tmpdir.exists()
    with pytest.raises(_pg.PostgresUnavailable):
        _pg.check_admin(url)


def test_outer_environment_does_not_leak() -> None:
    assert "CONVEYOR_URL" not in os.environ
    assert "CONVEYOR_APP" not in os.environ


def test_wait_for_returns_the_truthy_value(wait_for: WaitFor) -> None:
    done = threading.Event()
    timer = threading.Timer(0.05, done.set)
    timer.start()
    try:
        assert wait_for(lambda: done.is_set() and "ready", timeout=5) == "ready"
    finally:
        timer.cancel()


def test_wait_for_raises_at_the_deadline(wait_for: WaitFor) -> None:
    with pytest.raises(AssertionError, match="the impossible"):
        wait_for(lambda: False, timeout=0.05, message="the impossible")


def test_wait_for_async(wait_for_async: WaitForAsync) -> None:
    async def scenario() -> None:
        calls = 0

        async def third_time() -> int:
            nonlocal calls
            calls += 1
            return calls if calls >= 3 else 0

        assert await wait_for_async(third_time, timeout=5) == 3
        assert await wait_for_async(lambda: "sync ok", timeout=5) == "sync ok"
        with pytest.raises(AssertionError, match="never"):
            await wait_for_async(lambda: None, timeout=0.05, message="never")

    asyncio.run(scenario())
