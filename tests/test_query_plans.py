"""Every statement can reach its rows through an index: none reads the whole jobs table.

A query that scans the table is invisible on an empty test database and costs a full
pass over every retained row in production (the stager did, once: a million-row backlog
slowed the whole worker by a quarter). Partial indexes are easy to miss: SQLite uses one
only when the query repeats the index's WHERE term, PostgreSQL when it can prove it.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import psycopg
import pytest

from conveyor._storage import load_queries

#: Statements that read every row on purpose, with the reason.
WHOLE_TABLE = {
    "job_count_by_state": "counts every row by state (an explicit, rare request)",
    "job_list": "walks ids newest first and stops at the page size",
    "job_delete_by_queue": "deletes a whole queue (benchmark cleanup, rare)",
}

#: The statements of the hot path and the maintenance loops, checked on PostgreSQL.
HOT = ("job_fetch_available", "job_ack", "job_ack_completed", "job_heartbeat",
       "job_rescue_expired", "job_stage_due", "job_prune", "job_count_by_queue",
       "job_count_final_capped")


def _full_scans(plan: list[str]) -> list[str]:
    return [line for line in plan
            if re.match(r"SCAN (conveyor_jobs|j|o)\b", line) and "INDEX" not in line]


def _sqlite_params(sql: str) -> dict[str, object]:
    return {name: 1 for name in re.findall(r":([a-z_]+)", sql)}


@pytest.mark.sqlite
def test_sqlite_statements_use_an_index(tmp_path: Path) -> None:
    from .conftest import migrate

    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    migrate(url)
    conn = sqlite3.connect(tmp_path / "jobs.db")
    checked, scans = 0, {}
    for name, sql in sorted(load_queries("sqlite").items()):
        if "?" in sql or name in WHOLE_TABLE or "conveyor_jobs" not in sql:
            continue
        plan = [row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + sql,
                                                _sqlite_params(sql))]
        checked += 1
        if _full_scans(plan):
            scans[name] = plan
    conn.close()
    assert checked > 20
    assert scans == {}


@pytest.mark.postgres
def test_postgres_hot_statements_use_an_index(postgres_db_url: str) -> None:
    queries = load_queries("postgres")
    with psycopg.connect(postgres_db_url) as conn:
        # Small test tables make a sequential scan the cheapest plan; forbid it to see
        # whether an index plan exists at all (a generic plan, as prepared statements get).
        conn.execute("SET enable_seqscan = off")
        conn.execute("SET plan_cache_mode = force_generic_plan")
        scans = {}
        for name in HOT:
            sql = queries[name]
            params = list(dict.fromkeys(re.findall(r"%\(([a-z_]+)\)", sql)))
            numbered = sql
            for i, key in enumerate(params, 1):
                numbered = re.sub(rf"%\({key}\)[sb]", f"${i}", numbered)
            conn.execute(f"PREPARE probe_{name} AS {numbered}")
            nulls = ", ".join(["NULL"] * len(params))
            plan = [row[0] for row in conn.execute(
                f"EXPLAIN EXECUTE probe_{name}" + (f"({nulls})" if params else ""))]
            if any("Seq Scan on conveyor_jobs" in line for line in plan):
                scans[name] = plan
        conn.rollback()
    assert scans == {}
