"""Every statement reaches its rows through an index range: none reads a whole table or a
whole index, except the few on the reviewed list below.

A query that scans the table is invisible on an empty test database and costs a full
pass over every retained row in production (the stager did, once: a million-row backlog
slowed the whole worker by a quarter). Partial indexes are easy to miss: SQLite uses one
only when the query repeats the index's WHERE term, PostgreSQL when it can prove it. And
"uses an index" is not enough: walking a whole index (SQLite ``SCAN t USING INDEX i``,
PostgreSQL an Index Scan without an Index Cond) reads as many rows as the table scan it
replaced.

Every named statement of both dialects is explained (none is skipped but PostgreSQL's
``COPY``, which reads nothing and has no plan: ``NOT_PLANNED``); each plan's
whole reads (tables and indexes read from end to end) must equal its entry in
``WHOLE_READS``: nothing for a statement that is not listed. A stale entry fails too, so
the list stays reviewed.
"""

from __future__ import annotations

import dataclasses
import re
import secrets
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql as pgsql

from conveyor._storage import load_queries
from conveyor._storage.sqlite.retiring import setup_statements

from . import _pg
from .conftest import migrate


@dataclasses.dataclass(frozen=True)
class Whole:
    """A statement allowed to read whole tables or indexes (by name), per dialect."""

    reason: str
    sqlite: frozenset[str] = frozenset()
    postgres: frozenset[str] = frozenset()


def whole(reason: str, sqlite: set[str] | None = None, postgres: set[str] | None = None) -> Whole:
    return Whole(reason, frozenset(sqlite or ()), frozenset(postgres or ()))


#: The reviewed allow-list: statements that read everything of something on purpose.
#: Anything else that reads a whole table or index fails the test.
WHOLE_READS: dict[str, Whole] = {
    # -- counts that must see every row of a state ----------------------------------------
    "job_count_by_state": whole(
        "counts every job by state, any queue (an explicit, rare request), hot and history",
        sqlite={"conveyor_jobs", "conveyor_jobs_history"},
        postgres={"conveyor_jobs", "conveyor_jobs_history_*_state_queue_id_idx"}),
    "job_count_by_queue": whole(
        "the depth view: counts every available and running job per queue (pending, "
        "scheduled and retryable: a range of the cold state index, schema 10)",
        sqlite={"conveyor_jobs_fetch_idx", "conveyor_jobs_lease_idx"},
        postgres={"conveyor_jobs_fetch_idx", "conveyor_jobs_lease_idx"}),
    "metrics_depth_sample": whole(
        "the per-minute depth sample reads the depth view (as job_count_by_queue)",
        sqlite={"conveyor_jobs_fetch_idx", "conveyor_jobs_lease_idx"},
        postgres={"conveyor_jobs_fetch_idx", "conveyor_jobs_lease_idx"}),
    "job_count_requiring": whole(
        "counts waiting jobs that require worker labels: the whole partial index of them "
        "(empty while no job has requirements)",
        sqlite={"conveyor_jobs_requires_idx"}, postgres={"conveyor_jobs_requires_idx"}),
    "job_edit_prune": whole(
        "the pruner's pass over operators' edits (one row per edit and retry, few) to find "
        "those whose job is gone; each job is probed by id",
        sqlite={"conveyor_job_edits_job_idx"},
        postgres={"conveyor_job_edits_job_idx", "conveyor_job_edits_pkey"}),
    "fair_key_prune": whole(
        "the pruner's pass over fair keys' rows (one per key ever served, few once pruned) "
        "for idle default-weight ones; each key's waiting jobs probed in the fair index",
        sqlite={"conveyor_fair_keys"}, postgres={"conveyor_fair_keys_pkey"}),
    "job_count_running_by_node": whole(
        "counts every running job per node: the whole (small) partial index of running rows",
        sqlite={"conveyor_jobs_lease_idx"}, postgres={"conveyor_jobs_lease_idx"}),
    # -- maintenance and bulk -----------------------------------------------------------
    "job_rescue_expired": whole(
        "running rows whose lease expired OR whose node is silent: the OR needs every running "
        "row (partial index) and every node (one row per worker process)",
        sqlite={"conveyor_jobs_lease_idx", "conveyor_nodes"},
        postgres={"conveyor_jobs_lease_idx", "conveyor_nodes"}),
    "job_rescue_candidates": whole(
        "the dry run of job_rescue_expired (`conveyor rescue --dry-run`) reads what it reads",
        sqlite={"conveyor_jobs_lease_idx", "conveyor_nodes"},
        postgres={"conveyor_jobs_lease_idx", "conveyor_nodes"}),
    "job_failure_groups": whole(
        "PostgreSQL: newest failures first, the generic plan walks ids backward filtering "
        "on state until the scan cap (state_idx cannot give id order across two states); "
        "history's partitions merged by their id indexes",
        postgres={"conveyor_jobs_pkey", "conveyor_jobs_history_*_id_idx"}),
    "job_reserve_ids": whole(
        "SQLite's parity twin of PostgreSQL's id reservation: sqlite_sequence holds one "
        "row per table with AUTOINCREMENT",
        sqlite={"sqlite_sequence"}),
    "node_prune": whole(
        "one row per worker process; the cutoff depends on each row's own ttl",
        sqlite={"conveyor_nodes"}, postgres={"conveyor_nodes"}),
    "rate_limit_prune": whole(
        "one row per rate-limit key, no index on tat (the pruner's rare pass)",
        sqlite={"conveyor_rate_limits"}, postgres={"conveyor_rate_limits"}),
    # -- listings of whole small tables -------------------------------------------------
    "job_list": whole(
        "walks ids newest first and stops at the page size (hot and history merged by id); "
        "PostgreSQL: filtered by task, the running part is the lease index's rows (at most "
        "the workers' concurrency), dropped without a task (never prepared: folded)",
        sqlite={"conveyor_jobs", "conveyor_jobs_history_id_idx"},
        postgres={"conveyor_jobs_pkey", "conveyor_jobs_history_*_id_idx",
                  "conveyor_jobs_lease_idx"}),
    "node_list": whole(
        "lists every node (one row per worker process)",
        sqlite={"sqlite_autoindex_conveyor_nodes_1"}, postgres={"conveyor_nodes_pkey"}),
    "queue_list": whole(
        "lists every queue's settings (one row per configured queue)",
        sqlite={"sqlite_autoindex_conveyor_queues_1"}, postgres={"conveyor_queues_pkey"}),
    "queue_cooldown_list": whole(
        "every queue's cool-down (one row per queue ever throttled), read by each worker",
        sqlite={"sqlite_autoindex_conveyor_queue_cooldowns_1"},
        postgres={"conveyor_queue_cooldowns_pkey"}),
    "limiter_declared_list": whole(
        "every declared limiter (one row per limiter name)",
        sqlite={"sqlite_autoindex_conveyor_limiters_1"}, postgres={"conveyor_limiters_pkey"}),
    "limiter_holder_list": whole(
        "every live slot of every limiter (at most each limiter's concurrency per key)",
        sqlite={"sqlite_autoindex_conveyor_limiter_slots_1"},
        postgres={"conveyor_limiter_slots_pkey"}),
    "limiter_slot_prune": whole(
        "leases that ran out, among the few live slots (the pruner's rare pass)",
        sqlite={"conveyor_limiter_slots"}, postgres={"conveyor_limiter_slots"}),
    "schedule_list": whole(
        "lists every schedule (one row per declared schedule)",
        sqlite={"sqlite_autoindex_conveyor_schedules_1"}, postgres={"conveyor_schedules_pkey"}),
    "metrics_totals": whole(
        "every running total (one row per queue, task and metric)",
        sqlite={"sqlite_autoindex_conveyor_metrics_totals_1"},
        postgres={"conveyor_metrics_totals_pkey"}),
}

#: Identifiers that may follow a table name without being its alias.
_KEYWORDS = frozenset([
    "where", "set", "on", "order", "group", "limit", "join", "left", "right", "inner", "cross",
    "natural", "using", "values", "select", "returning", "union", "except", "intersect",
    "having", "window", "as", "default",
])

_TABLE_REF = re.compile(r"\b(?:FROM|JOIN|UPDATE|INTO)\s+(conveyor_\w+)(?:\s+(?:AS\s+)?(\w+))?",
                        re.IGNORECASE)


def conveyor_aliases(sql: str) -> dict[str, str]:
    """``{alias: table}`` for every ``conveyor_*`` table the statement names with an alias."""
    aliases = {}
    for table, alias in _TABLE_REF.findall(sql):
        if alias and alias.lower() not in _KEYWORDS:
            aliases[alias] = table
    return aliases


def sqlite_whole_reads(plan: list[str], tables: set[str], sql: str) -> set[str]:
    """The tables (``SCAN t``) and indexes (``SCAN t USING [COVERING] INDEX i``, no range)
    this plan reads from end to end. Scans of subqueries, CTEs, views, constant rows and
    JSON table functions are not reads of a stored table."""
    aliases = conveyor_aliases(sql)
    found = set()
    for line in plan:
        match = re.fullmatch(r"SCAN (\S+)(?: USING (?:COVERING )?INDEX (\S+))?", line.strip())
        if match is None:
            continue
        name, index = match[1], match[2]
        table = name if name in tables else aliases.get(name)
        if table is None or table not in tables:
            continue  # a subquery, CTE, view or table function
        found.add(index or table)
    return found


def postgres_whole_reads(node: dict[str, Any]) -> set[str]:
    """The relations (Seq Scan) and indexes (an Index, Index Only or Bitmap Index Scan
    without an Index Cond) this plan tree reads from end to end."""
    found = set()
    kind = node["Node Type"]
    if kind == "Seq Scan":
        found.add(history_part(node["Relation Name"]))
    elif kind in ("Index Scan", "Index Only Scan", "Bitmap Index Scan") and "Index Cond" not in node:
        found.add(history_part(node["Index Name"]))
    for child in node.get("Plans", ()):
        found |= postgres_whole_reads(child)
    return found


#: History's day partitions (and their indexes) are named after their day and class:
#: ``conveyor_jobs_history_done_20261126_id_idx`` reads as ``conveyor_jobs_history_*_id_idx``.
_HISTORY_PART = re.compile(r"^conveyor_jobs_history_(?:done|discarded)_(?:\d{8}|default)(.*)$")


def history_part(name: str) -> str:
    return _HISTORY_PART.sub(r"conveyor_jobs_history_*\1", name)


def _expected(dialect: str) -> dict[str, set[str]]:
    return {name: set(getattr(entry, dialect)) for name, entry in WHOLE_READS.items()}


def _compare(dialect: str, found: dict[str, set[str]], plans: dict[str, list[str]]) -> None:
    queries = load_queries(dialect)
    unplanned = NOT_PLANNED if dialect == "postgres" else set()
    assert set(plans) == set(queries) - unplanned, "every statement is explained"
    unknown = set(WHOLE_READS) - set(queries)
    assert not unknown, f"allow-list names statements that do not exist: {sorted(unknown)}"
    expected = _expected(dialect)
    wrong = {name: reads for name, reads in found.items() if reads != expected.get(name, set())}
    report = "\n".join(
        f"{name}: reads whole {sorted(reads)}, allowed {sorted(expected.get(name, set()))}\n    "
        + "\n    ".join(plans[name])
        for name, reads in sorted(wrong.items())
    )
    assert not wrong, (
        f"{dialect}: a statement reads a whole table or index (give it an index range, or a "
        f"reviewed WHOLE_READS entry), or a WHOLE_READS entry is stale:\n{report}"
    )


# -- SQLite ----------------------------------------------------------------------------------


def _sqlite_params(sql: str) -> dict[str, object] | tuple[object, ...]:
    if "?" in sql:  # the executemany statements are positional
        return (1,) * sql.count("?")
    return {name: 1 for name in re.findall(r":([a-z_]+)", sql)}


def sqlite_plans(path: Path) -> tuple[dict[str, set[str]], dict[str, list[str]]]:
    conn = sqlite3.connect(path)
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        found: dict[str, set[str]] = {}
        plans: dict[str, list[str]] = {}
        queries = load_queries("sqlite")
        for statement in setup_statements(queries):  # the TEMP objects
            conn.execute(statement)  # that job_ack_retire_at_once writes through; no reads
        for name, sql in sorted(queries.items()):
            if name == "job_ack_retire_setup":
                plans[name], found[name] = [], set()
                continue
            plan = [row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, _sqlite_params(sql))]
            plans[name] = plan
            found[name] = sqlite_whole_reads(plan, tables, sql)
    finally:
        conn.close()
    return found, plans


@pytest.mark.sqlite
def test_sqlite_statements_read_index_ranges(tmp_path: Path) -> None:
    migrate(f"sqlite:///{tmp_path / 'jobs.db'}")
    found, plans = sqlite_plans(tmp_path / "jobs.db")
    assert len(plans) > 50
    # the hottest statements are among those checked, and read ranges only
    for hot in ("job_ack_completed", "job_fetch_available", "job_stage_due", "job_heartbeat",
                "job_insert_plain", "job_prune", "job_count_final_by_queue",
                # history: the archiver's pick, id lookups and searches through the view
                "job_archive_pick", "job_get", "job_search", "job_history_prune"):
        assert hot in plans and found[hot] == set(), (hot, plans.get(hot))
    # the fair-key pruner probes each key's waiting jobs in the fair index
    assert any("conveyor_jobs_fair_idx (queue=? AND fair_key=?)" in line
               for line in plans["fair_key_prune"]), plans["fair_key_prune"]
    _compare("sqlite", found, plans)


# -- PostgreSQL ------------------------------------------------------------------------------

#: A realistic mix, so that generic plans are costed on real statistics: mostly finished
#: jobs, a backlog of waiting ones, a few running, across queues, tasks and nodes.
_FILL = """
INSERT INTO conveyor_jobs (task, queue, state, priority, attempt, scheduled_at, finished_at,
                           lease_owner, lease_token, lease_expires_at, unique_key,
                           concurrency_key)
SELECT 't' || (i % 7), 'q' || (i % 5), s.state, (i % 3)::smallint,
       CASE WHEN s.state IN ('scheduled', 'available') THEN 0 ELSE 1 END,
       now() + (i % 100 - 50) * interval '1 second',
       CASE WHEN s.state IN ('completed', 'cancelled', 'discarded') THEN now() END,
       CASE WHEN s.state = 'running' THEN 'node-' || (i % 3) END,
       CASE WHEN s.state = 'running' THEN i END,
       CASE WHEN s.state = 'running' THEN now() + interval '30 seconds' END,
       CASE WHEN i % 50 = 0 THEN 'k' || i END,
       CASE WHEN i % 20 = 0 THEN 'c' || (i % 4) END
FROM generate_series(1, 20000) AS i
CROSS JOIN LATERAL (SELECT CASE
    WHEN i % 100 < 80 THEN 'completed' WHEN i % 100 < 88 THEN 'available'
    WHEN i % 100 < 92 THEN 'scheduled' WHEN i % 100 < 94 THEN 'retryable'
    WHEN i % 100 < 95 THEN 'running' WHEN i % 100 < 97 THEN 'cancelled'
    ELSE 'discarded' END AS state) AS s;
INSERT INTO conveyor_nodes (id, hostname, pid, queues, started_at, heartbeat_at)
SELECT 'node-' || i, 'h', i, '{}', now(), now() FROM generate_series(0, 2) AS i;
INSERT INTO conveyor_jobs_history
SELECT * FROM conveyor_jobs WHERE state IN ('completed', 'cancelled', 'discarded') AND id % 10 < 9;
DELETE FROM conveyor_jobs WHERE state IN ('completed', 'cancelled', 'discarded') AND id % 10 < 9;
ANALYZE
"""


def filled_database(admin_url: str, prefix: str, fill: str) -> Iterator[str]:
    """A database of its own (ANALYZE's row counts outlive a rollback, and its statistics
    are the test's), migrated, then ``fill`` run statement by statement; dropped after."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(name)))
    url = _pg.with_database(admin_url, name)
    try:
        migrate(url)
        with psycopg.connect(url, autocommit=True) as conn:
            for statement in fill.split(";"):
                conn.execute(statement)
        yield url
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                pgsql.Identifier(name)))


@pytest.fixture
def plan_db(postgres_admin_url: str) -> Iterator[str]:
    """Every table filled as a busy cluster's would be, and analyzed."""
    yield from filled_database(postgres_admin_url, "conveyor_plans", _FILL)


#: Statements PostgreSQL cannot explain (COPY writes rows and reads none), checked to be
#: exactly the COPY statements, so nothing else slips out of the test.
NOT_PLANNED = {"job_copy_plain"}


def _is_copy(sql: str) -> bool:
    code = "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
    return code.lstrip().upper().startswith("COPY ")


def postgres_plans(url: str) -> tuple[dict[str, set[str]], dict[str, list[str]]]:
    found, plans = {}, {}
    copies = {name for name, sql in load_queries("postgres").items() if _is_copy(sql)}
    assert copies == NOT_PLANNED
    with psycopg.connect(url) as conn:
        # Forbid the sequential scan to see whether an index plan exists at all, on the
        # generic plan that prepared statements get.
        conn.execute("SET enable_seqscan = off")
        conn.execute("SET plan_cache_mode = force_generic_plan")
        for i, (name, sql) in enumerate(sorted(load_queries("postgres").items())):
            if name in NOT_PLANNED:
                continue
            params = list(dict.fromkeys(re.findall(r"%\(([a-z_]+)\)", sql)))
            numbered = sql
            for n, key in enumerate(params, 1):
                numbered = re.sub(rf"%\({key}\)[sb]", f"${n}", numbered)
            conn.execute(f"PREPARE probe_{i} AS {numbered}")
            nulls = ", ".join(["NULL"] * len(params))
            execute = f"EXECUTE probe_{i}" + (f"({nulls})" if params else "")
            (doc,) = conn.execute(f"EXPLAIN (FORMAT JSON) {execute}").fetchone() or (None,)
            root = doc[0]["Plan"]
            plans[name] = [line for (line,) in conn.execute(f"EXPLAIN {execute}")]
            found[name] = postgres_whole_reads(root)
        conn.rollback()
    return found, plans


@pytest.mark.postgres
def test_postgres_statements_read_index_ranges(plan_db: str) -> None:
    found, plans = postgres_plans(plan_db)
    assert len(plans) > 50
    for hot in ("job_ack_completed", "job_fetch_available", "job_stage_due", "job_heartbeat",
                "job_prune", "job_count_final_by_queue", "job_rescue_expired"):
        assert hot in plans
    # history: the archiver's pick, id lookups through the view (both tables by index)
    for hot in ("job_archive_pick", "job_get", "job_search", "job_history_prune",
                "job_history_restore", "job_purge_pick"):
        assert found[hot] == set(), (hot, plans[hot])
    assert any("conveyor_jobs_history" in line and "id_idx" in line for line in plans["job_get"])
    # the fair-key pruner probes each key's waiting jobs in the fair index, by its key
    # (a join filter over the index, as an anti-join was planned once, would walk it whole)
    pruned = "\n".join(plans["fair_key_prune"])
    assert "using conveyor_jobs_fair_idx on conveyor_jobs j" in pruned, pruned
    assert "Index Cond: ((queue = f.queue) AND (fair_key = f.fair_key))" in pruned, pruned
    _compare("postgres", found, plans)


def test_whole_reads_have_reasons() -> None:
    for name, entry in WHOLE_READS.items():
        assert entry.reason.strip() and "\n" not in entry.reason, name
        assert entry.sqlite or entry.postgres, name
