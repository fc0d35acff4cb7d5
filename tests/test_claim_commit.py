"""On PostgreSQL a claim's own transaction commits without waiting for its WAL flush
(``job_claim_commit`` in ``postgres/sql/jobs.sql``: a claim a server crash undoes is a
lease that never was, and the job runs again); the session's own setting is left alone,
and a database that sets ``conveyor.claim_commit`` keeps its claims at that level. Real
server, the suite's migrated database."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import psycopg
import pytest

from conveyor import Conveyor
from conveyor._storage import load_queries

QUERIES = load_queries("postgres")


@pytest.fixture
def queue(postgres_db_url: str) -> Iterator[str]:
    """A queue of its own in the shared database, holding three available jobs."""
    name = f"claim-commit-{secrets.token_hex(4)}"
    app = Conveyor(postgres_db_url)
    try:
        @app.task(queue=name)
        def noop(i: int) -> None:
            pass

        app.enqueue_many([noop.job(i) for i in range(3)])
        yield name
    finally:
        app.close()


def claim_setting(conn: psycopg.Connection[tuple[object, ...]], queue: str) -> str:
    """Claim one job inside a transaction; synchronous_commit as its commit will see it."""
    with conn.transaction(force_rollback=True):
        rows = conn.execute(QUERIES["job_fetch_available"], {
            "queue": queue, "limit": 1, "owner": "test", "lease_ttl": 30.0}).fetchall()
        assert len(rows) == 1
        found = conn.execute("SHOW synchronous_commit").fetchone()
    assert found is not None
    return str(found[0])


def test_a_claim_commits_without_waiting_for_the_flush(postgres_db_url: str,
                                                       queue: str) -> None:
    with psycopg.connect(postgres_db_url, autocommit=True) as conn:
        session = conn.execute("SHOW synchronous_commit").fetchone()
        assert claim_setting(conn, queue) == "off"
        assert conn.execute("SHOW synchronous_commit").fetchone() == session  # untouched


def test_conveyor_claim_commit_keeps_claims_at_the_databases_level(postgres_db_url: str,
                                                                   queue: str) -> None:
    with psycopg.connect(postgres_db_url, autocommit=True) as conn:
        conn.execute("SET conveyor.claim_commit = 'remote_apply'")
        assert claim_setting(conn, queue) == "remote_apply"
        conn.execute("SET conveyor.claim_commit = ''")  # as RESET leaves a custom setting
        assert claim_setting(conn, queue) == "off"


def test_every_claim_statement_carries_it() -> None:
    """The plain, fair and routed claims alike (the fair ones are run by
    tests/test_fair*.py)."""
    claims = [name for name in QUERIES if name.startswith("job_fetch_available")]
    assert len(claims) >= 8, claims
    for name in claims:
        assert "set_config('synchronous_commit'" in QUERIES[name], name
    assert "synchronous_commit" not in load_queries("sqlite")["job_fetch_available"]
