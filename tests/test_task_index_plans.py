"""PostgreSQL's task index (schema 22): a claim pays nothing there, and the operator
reads that filter by task still reach their rows through indexes on a large backlog.

A claim changes a row's state, so it is never a HOT update: PostgreSQL adds an entry
for the new row version to every index whose predicate that version satisfies. The task
index (task, id) had none, so every claim paid for an entry (about 3 µs of 18 per job,
/tmp/sqlexp.py-style: 100-job claims of 30,000 jobs) and vacuum for removing it. It now
leaves running rows out; the reads by task take those from the lease index
(``conveyor_jobs_split`` and the ``job_task_parts`` fragment)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql as pgsql

from conveyor._storage import load_queries

from .test_query_plans import filled_database

pytestmark = pytest.mark.postgres

#: 60,000 available jobs of 20 tasks (running ones among them: task t0 only), a rare
#: task's 5 jobs, failed and finished ones, and history; analyzed.
_FILL = """
INSERT INTO conveyor_jobs (task, queue, state, attempt, finished_at, lease_owner, lease_token,
                           lease_expires_at)
SELECT 't' || (i % 20), 'q' || (i % 3), s.state, 1,
       CASE WHEN s.state IN ('completed', 'discarded') THEN now() END,
       CASE WHEN s.state = 'running' THEN 'n1' END,
       CASE WHEN s.state = 'running' THEN i END,
       CASE WHEN s.state = 'running' THEN now() + interval '60 seconds' END
FROM generate_series(1, 70000) AS i
CROSS JOIN LATERAL (SELECT CASE WHEN i <= 10000 THEN 'completed' WHEN i % 100 = 0 THEN 'running'
    WHEN i % 41 = 0 THEN 'retryable' WHEN i % 43 = 0 THEN 'discarded'
    ELSE 'available' END AS state) AS s;
INSERT INTO conveyor_jobs (task, queue, state) SELECT 'rare', 'q1', 'available'
FROM generate_series(1, 4);
INSERT INTO conveyor_jobs (task, queue, state, attempt, lease_owner, lease_token, lease_expires_at)
VALUES ('rare', 'q1', 'running', 1, 'n1', 1, now() + interval '60 seconds');
INSERT INTO conveyor_jobs_history SELECT * FROM conveyor_jobs WHERE id <= 10000;
DELETE FROM conveyor_jobs WHERE id <= 10000;
ANALYZE
"""

_FILTER: dict[str, Any] = {
    "states": None, "queue": None, "task": None, "tag": None, "args": None, "text": None,
    "error_key": None, "ids": None, "min_id": None, "max_id": None, "before_id": None}
_RETRYABLE = ["scheduled", "retryable", "completed", "cancelled", "discarded"]


def _reads(task: str) -> dict[str, dict[str, Any]]:
    """The task-filtered operator reads with the values the app binds (no state filter:
    both the running part and the rest must be read)."""
    return {
        "job_list": {"state": None, "queue": None, "task": task, "before_id": None,
                     "limit": 50},
        "job_search": dict(_FILTER, task=task, limit=51),
        "job_search_newer": dict(_FILTER, task=task, limit=51, after_id=0),
        "job_count_capped": dict(_FILTER, task=task, cap=1000),
        "job_pick_matching": dict(_FILTER, task=task, allowed=_RETRYABLE, limit=1000),
        "job_purge_count": {"states": ["available", "retryable"], "queue": None, "task": task,
                            "older_than": None, "after_id": 0, "max_id": None},
        "job_purge_pick": {"states": ["available", "retryable"], "queue": None, "task": task,
                           "older_than": None, "after_id": 0, "max_id": None, "limit": 1000},
        "job_failure_groups": {"queue": None, "task": task, "limit": 20, "scan": 1000},
    }


@pytest.fixture(scope="module")
def backlog_db(postgres_admin_url: str) -> Iterator[str]:
    yield from filled_database(postgres_admin_url, "conveyor_task_plans", _FILL)


def _plan(conn: psycopg.Connection[Any], sql: str, values: dict[str, Any]) -> dict[str, Any]:
    """The plan PostgreSQL makes for these values: these reads run unprepared (the job
    list and searches) or their first executions are custom plans (the purge)."""
    row = conn.execute("EXPLAIN (FORMAT JSON) " + sql, values).fetchone()
    conn.rollback()
    assert row is not None
    return dict(row[0][0]["Plan"])


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _nodes(child)


def test_a_claimed_row_enters_only_the_primary_key_and_the_lease_index(backlog_db: str) -> None:
    """Each index of the hot table whose predicate a claimed plain job satisfies (none:
    every row) gets an entry at every claim. Only the primary key and the lease index
    may: the task index leaves running rows out (schema 22)."""
    queries = load_queries("postgres")
    values = {"queue": "q2", "limit": 100, "owner": "n2", "lease_ttl": 60.0, "channel": "c",
              "finished_channel": "f"}
    with psycopg.connect(backlog_db) as conn:
        claimed = [row[0] for row in conn.execute(queries["job_fetch_available"], values)]
        assert len(claimed) == 100
        entered = set()
        for name, pred in conn.execute(
                "SELECT c.relname, pg_get_expr(i.indpred, i.indrelid) FROM pg_index AS i"
                " JOIN pg_class AS c ON c.oid = i.indexrelid"
                " WHERE i.indrelid = 'conveyor_jobs'::regclass").fetchall():
            check = pgsql.SQL("SELECT count(*) FROM conveyor_jobs WHERE id = ANY(%s) AND ({})")
            (n,) = conn.execute(check.format(pgsql.SQL(pred or "true")),
                                [claimed]).fetchone() or (0,)
            if n:
                entered.add(name)
        conn.rollback()
    assert entered == {"conveyor_jobs_pkey", "conveyor_jobs_lease_idx"}


@pytest.mark.parametrize("task", ["rare", "t7"])
def test_reads_by_task_use_the_task_and_lease_indexes(backlog_db: str, task: str) -> None:
    """A rare task's jobs (5 of 60,000) are read through the task index, a common one's
    page through it or a short walk of ids, never a whole table; the running part comes
    from the lease index, never from a walk of the primary key (which, for a task with
    no running job, reads the whole table)."""
    queries = load_queries("postgres")
    with psycopg.connect(backlog_db) as conn:
        for name, values in _reads(task).items():
            plan = _plan(conn, queries[name], values)
            nodes = list(_nodes(plan))
            text = json.dumps(plan)
            assert not [n for n in nodes if n["Node Type"] == "Seq Scan"
                        and n["Relation Name"] == "conveyor_jobs"], (name, text)
            used = {n.get("Index Name") for n in nodes}
            if task == "rare":
                assert "conveyor_jobs_task_idx" in used, (name, text)
            for n in nodes:
                if n.get("Index Name") == "conveyor_jobs_pkey" and "Index Cond" not in n:
                    assert "state = 'running'" not in n.get("Filter", ""), (name, text)
            if name in ("job_list", "job_search", "job_search_newer", "job_count_capped"):
                assert "conveyor_jobs_lease_idx" in used, (name, text)


@pytest.mark.parametrize("state", [None, "running", "available"])
@pytest.mark.parametrize("task", ["rare", "t0", None])
def test_reads_by_task_find_running_and_waiting_jobs_once(backlog_db: str, task: str | None,
                                                           state: str | None) -> None:
    """The split reads return what conveyor_jobs_all holds: running jobs and the others,
    each once, newest first."""
    queries = load_queries("postgres")
    with psycopg.connect(backlog_db) as conn:
        listed = [r[0] for r in conn.execute(queries["job_list"], {
            "state": state, "queue": None, "task": task, "before_id": None, "limit": 300})]
        found = [r[0] for r in conn.execute(queries["job_search"], dict(
            _FILTER, task=task, states=None if state is None else [state], limit=300))]
        (count,) = conn.execute(queries["job_count_capped"], dict(
            _FILTER, task=task, states=None if state is None else [state], cap=100_000)
        ).fetchone() or (0,)
        expected = [r[0] for r in conn.execute(
            "SELECT id FROM conveyor_jobs_all WHERE (%(t)s::text IS NULL OR task = %(t)s)"
            " AND (%(s)s::text IS NULL OR state = %(s)s) ORDER BY id DESC",
            {"t": task, "s": state})]
    assert listed == found == expected[:300]
    assert count == min(len(expected), 100_000)
    if task is not None and state is None:
        assert any(i % 100 == 0 for i in expected) or task == "rare"  # running ones among them
