"""``conveyor_enqueue()``: a job enqueued from SQL (PostgreSQL) is one a worker cannot tell
from a job enqueued from Python: the same row, the same checks, the same wake-up; it
works inside the caller's transaction and from a trigger (docs/sql-enqueue.md)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors

from conveyor import Conveyor

from .conftest import wait_for
from .test_results import worker_thread

pytestmark = pytest.mark.postgres

#: Fields that differ between any two jobs, however they were enqueued.
OWN = {"id", "created_at", "scheduled_at"}


@pytest.fixture
def url(postgres_db_url: str) -> str:
    from .conftest import truncate_conveyor_tables

    truncate_conveyor_tables(postgres_db_url)
    return postgres_db_url


@pytest.fixture
def sql(url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(url, autocommit=True) as conn:
        yield conn


@pytest.fixture
def app(url: str) -> Iterator[Conveyor]:
    conveyor = Conveyor(url)
    try:
        yield conveyor
    finally:
        conveyor.close()


def one(conn: psycopg.Connection[Any], query: str, *params: Any) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def stand_in(app: Conveyor, name: str) -> Any:
    """A task of that name taking any arguments, as `conveyor enqueue` without --app has."""

    def anything(*args: Any, **kwargs: Any) -> None: ...

    return app.task(name=name)(anything)


def same_but_own(a: Any, b: Any) -> dict[str, tuple[Any, Any]]:
    names = [f.name for f in dataclasses.fields(a) if not f.name.startswith("_")]
    return {k: (getattr(a, k), getattr(b, k)) for k in names
            if k not in OWN and getattr(a, k) != getattr(b, k)}


def test_a_job_from_sql_is_the_job_python_writes(app: Conveyor, sql: psycopg.Connection[Any]) -> None:
    job_id = one(sql, """SELECT conveyor_enqueue('send_email', args => '["ada@example.com"]',
                         kwargs => '{"subject": "hi"}', queue => 'mail', priority => 5,
                         max_attempts => 3, tags => '["signup"]', meta => '{"by": "sql"}')""")
    from_python = stand_in(app, "send_email").options(
        queue="mail", priority=5, max_attempts=3, tags=["signup"], meta={"by": "sql"}
    ).enqueue("ada@example.com", subject="hi")
    from_sql = app.get_job(job_id)
    assert from_sql is not None
    assert from_sql.state == "available"
    assert same_but_own(from_sql, app.get_job(from_python.id)) == {}


def test_the_defaults_are_the_python_defaults(app: Conveyor, sql: psycopg.Connection[Any]) -> None:
    job_id = one(sql, "SELECT conveyor_enqueue('cleanup')")
    from_python = stand_in(app, "cleanup").enqueue()
    assert same_but_own(app.get_job(job_id), app.get_job(from_python.id)) == {}


def test_delay_and_run_at_schedule_the_job(app: Conveyor, sql: psycopg.Connection[Any]) -> None:
    delayed = app.get_job(one(sql, "SELECT conveyor_enqueue('later', delay => 3600)"))
    at = app.get_job(one(sql, "SELECT conveyor_enqueue('later', run_at => now() + interval '2 hours')"))
    past = app.get_job(one(sql, "SELECT conveyor_enqueue('later', run_at => now() - interval '1 hour')"))
    assert delayed is not None and at is not None and past is not None
    assert (delayed.state, at.state, past.state) == ("scheduled", "scheduled", "available")
    assert 3500 < (delayed.scheduled_at - delayed.created_at).total_seconds() <= 3600


def test_the_same_wake_up_as_python(app: Conveyor, url: str, sql: psycopg.Connection[Any]) -> None:
    with psycopg.connect(url, autocommit=True) as listener:
        listener.execute("LISTEN conveyor_jobs")
        one(sql, "SELECT conveyor_enqueue('ping', queue => 'fast')")
        stand_in(app, "ping").options(queue="fast").enqueue()
        received = [(n.channel, n.payload) for n in listener.notifies(timeout=10, stop_after=2)]
    assert received == [("conveyor_jobs", "fast"), ("conveyor_jobs", "fast")]


def test_a_worker_runs_a_job_enqueued_from_sql(app: Conveyor, sql: psycopg.Connection[Any]) -> None:
    seen: list[tuple[str, int]] = []

    @app.task(name="greet")
    def greet(name: str, times: int = 1) -> str:
        seen.append((name, times))
        return name * times

    with worker_thread(app):
        job_id = one(sql, """SELECT conveyor_enqueue('greet', args => '["ab"]',
                                                     kwargs => '{"times": 2}')""")
        wait_for(lambda: (j := app.get_job(job_id)) is not None and j.state == "completed",
                 timeout=30, message="the worker to run the SQL job")
    assert seen == [("ab", 2)]
    done = app.get_job(job_id)
    assert done is not None and done.result == "abab"


def test_it_joins_the_callers_transaction(app: Conveyor, url: str) -> None:
    with psycopg.connect(url) as conn:
        kept = one(conn, "SELECT conveyor_enqueue('kept')")
        conn.commit()
        dropped = one(conn, "SELECT conveyor_enqueue('dropped')")
        assert app.get_job(dropped) is None, "visible before its transaction committed"
        conn.rollback()
    assert app.get_job(kept) is not None
    assert app.get_job(dropped) is None
    assert app.count_jobs().get("available") == 1


TRIGGER = """
CREATE TABLE orders (id bigint PRIMARY KEY, email text NOT NULL);
CREATE FUNCTION orders_send_receipt() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM conveyor_enqueue('send_receipt', args => jsonb_build_array(NEW.id, NEW.email),
                             queue => 'mail');
    RETURN NEW;
END
$$;
CREATE TRIGGER orders_send_receipt AFTER INSERT ON orders
    FOR EACH ROW EXECUTE FUNCTION orders_send_receipt();
"""


def test_a_trigger_enqueues_a_job_per_new_row(app: Conveyor, url: str) -> None:
    from pathlib import Path

    guide = (Path(__file__).resolve().parent.parent / "docs" / "sql-enqueue.md").read_text()
    assert TRIGGER.strip() in guide, "the guide's trigger example is the one tested here"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS orders CASCADE")
        conn.execute("DROP FUNCTION IF EXISTS orders_send_receipt() CASCADE")
        conn.execute(TRIGGER)
        try:
            conn.execute("INSERT INTO orders VALUES (1, 'a@example.com'), (2, 'b@example.com')")
            with pytest.raises(errors.UniqueViolation):  # a failed insert enqueues nothing
                conn.execute("INSERT INTO orders VALUES (3, 'c@example.com'), (1, 'dup')")
        finally:
            conn.execute("DROP TABLE orders CASCADE")
            conn.execute("DROP FUNCTION orders_send_receipt() CASCADE")
    jobs = app.list_jobs(queue="mail")
    assert sorted((j.task, j.args) for j in jobs) == [
        ("send_receipt", [1, "a@example.com"]), ("send_receipt", [2, "b@example.com"])]


def test_a_unique_key_returns_the_live_job(app: Conveyor, sql: psycopg.Connection[Any]) -> None:
    @app.task(name="sync_user")
    def sync_user(user_id: int) -> None: ...

    first = one(sql, "SELECT conveyor_enqueue('sync_user', args => '[7]', unique_key => 'u7')")
    again = one(sql, "SELECT conveyor_enqueue('sync_user', args => '[8]', unique_key => 'u7')")
    from_python = sync_user.options(unique_key="u7").enqueue(9)
    assert again == first
    assert from_python.duplicate and from_python.id == first
    other = one(sql, "SELECT conveyor_enqueue('sync_user', args => '[7]', unique_key => 'u8')")
    assert other != first


BAD = [
    ("task => ''", "invalid task name"),
    ("task => '9lives'", "invalid task name"),
    ("task => NULL", "invalid task name"),
    ("task => repeat('a', 201)", "invalid task name"),
    ("task => 't', queue => 'bad queue'", "invalid queue name"),
    ("task => 't', queue => ''", "invalid queue name"),
    ("task => 't', priority => 40000", "priority must be"),
    ("task => 't', max_attempts => 0", "max_attempts must be"),
    ("task => 't', delay => -1", "delay must be"),
    ("task => 't', delay => 'NaN'", "delay must be"),
    ("task => 't', run_at => now() + interval '200 years'", "run_at must be"),
    ("task => 't', args => '{\"a\": 1}'", "must be a JSON array"),
    ("task => 't', kwargs => '[1]'", "must be a JSON object"),
    ("task => 't', tags => '[1]'", "invalid tag"),
    ("task => 't', tags => '[\"\"]'", "invalid tag"),
    ("task => 't', tags => to_jsonb(array_fill('x'::text, ARRAY[51]))", "over the limit of 50 tags"),
    ("task => 't', meta => '[]'", "meta must be a JSON object"),
    ("task => 't', unique_key => repeat('k', 500)", "unique key of task"),
]


@pytest.mark.parametrize(("call", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_input_is_refused_with_the_reason_and_writes_nothing(
        app: Conveyor, sql: psycopg.Connection[Any], call: str, message: str) -> None:
    with pytest.raises(errors.InvalidParameterValue, match=message):
        sql.execute(f"SELECT conveyor_enqueue({call})")
    assert app.count_jobs() == {} or sum(app.count_jobs().values()) == 0


def test_an_oversized_payload_is_refused(app: Conveyor, sql: psycopg.Connection[Any]) -> None:
    with pytest.raises(errors.ProgramLimitExceeded, match="over the cap of 1048576 bytes"):
        sql.execute("SELECT conveyor_enqueue('big', args => jsonb_build_array(repeat('x', 1048577)))")
    with pytest.raises(errors.ProgramLimitExceeded, match="over the cap of 100 bytes"):
        sql.execute("SELECT conveyor_enqueue('big', meta => jsonb_build_object('k', repeat('x', 100)),"
                    " max_payload_bytes => 100)")
    # a cap of one's own, as ConveyorConfig.max_payload_bytes sets it for Python callers
    assert one(sql, "SELECT conveyor_enqueue('small', args => '[1]', max_payload_bytes => 100)")
    assert sum(app.count_jobs().values()) == 1


def test_one_statement_can_enqueue_many(app: Conveyor, sql: psycopg.Connection[Any]) -> None:
    n = one(sql, "SELECT count(conveyor_enqueue('bulk', args => jsonb_build_array(i)))"
                 " FROM generate_series(1, 1000) AS i")
    assert n == 1000
    assert app.count_jobs(queue="default")["available"] == 1000
