"""SQLite: a prune pass reads the history rows old enough to go, not all of history.

History has one index on ``finished_at`` (no state column) and one on ``(state, queue,
id)``. Given ``state IN (...) AND finished_at < ...``, SQLite's planner took the state
index and read every finished row of history on every pass to find none old enough: in
a 30-minute steady state (``bench/analysis.md``) the pruner's pass, once a minute,
grew with the file to seconds of holding the write lock, and throughput fell to a third
for those windows. The statement now searches ``finished_at`` first.

The measure here is SQLite's own work: the virtual machine instructions the statement
runs (``set_progress_handler``), with 2,000 and then 20,000 recent rows beside the same
few old ones. It must not grow with the recent rows, and must delete exactly the old
ones past their state's age.
"""

# The statements below are built from this file's constants only.
# ruff: noqa: S608

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from conveyor import Conveyor
from conveyor._storage import load_queries

DAY = 86_400.0
NOW = "(julianday('now') - 2440587.5) * 86400.0"
#: Rows old enough for some age, and what a pass with 1-day / 7-day ages must do to them.
OLD = [  # (id, state, days since it finished, deleted)
    (1, "completed", 2, True), (2, "completed", 3, True), (3, "cancelled", 2, True),
    (4, "discarded", 8, True), (5, "discarded", 2, False), (6, "completed", 0.5, False),
]


def _history(tmp: Path, recent: int, analyze: bool) -> Path:
    path = tmp / f"history-{recent}.db"
    app = Conveyor(f"sqlite:///{path}")
    app.migrate()
    app.close()
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN")
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
            " INSERT INTO conveyor_jobs_history (id, task, queue, args, kwargs, state,"
            " scheduled_at, created_at, finished_at)"
            f" SELECT 100 + i, 'noop', 'default', '[]', '{{}}', 'completed', {NOW} - 120,"
            f" {NOW} - 120, {NOW} - 60 FROM n", (recent,))
        conn.executemany(
            "INSERT INTO conveyor_jobs_history (id, task, queue, args, kwargs, state,"
            f" scheduled_at, created_at, finished_at) VALUES (?, 'noop', 'default', '[]',"
            f" '{{}}', ?, {NOW} - ? * 86400.0, {NOW} - ? * 86400.0, {NOW} - ? * 86400.0)",
            [(i, state, days, days, days) for i, state, days, _ in OLD])
        conn.execute("COMMIT")
        if analyze:  # Conveyor never runs it; an operator may
            conn.execute("ANALYZE")
    return path


def _prune_once(path: Path) -> tuple[list[int], int]:
    """One batch of the pruner's history statement: the ids it deleted, and the
    instructions SQLite ran for it (in hundreds)."""
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0  # go on

    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.set_progress_handler(count, 100)
        rows = conn.execute(load_queries("sqlite")["job_history_prune"], {
            "completed_age": DAY, "discarded_age": 7 * DAY, "limit": 1000,
            "queue": None, "exclude": json.dumps([])}).fetchall()
    return sorted(r[0] for r in rows), steps[0]


@pytest.mark.parametrize("analyze", [False, True], ids=["no-statistics", "analyzed"])
def test_a_prune_pass_reads_only_rows_old_enough_to_go(tmp_path: Path, analyze: bool) -> None:
    small_deleted, small_steps = _prune_once(_history(tmp_path, 2_000, analyze))
    large_deleted, large_steps = _prune_once(_history(tmp_path, 20_000, analyze))
    expected = [i for i, _, _, deleted in OLD if deleted]
    assert small_deleted == expected and large_deleted == expected
    # reading every recent row costs far more than 100 instructions per 10 rows
    assert large_steps <= small_steps + 50, (
        f"the pass grew with history's recent rows: {small_steps} -> {large_steps} "
        "hundreds of instructions for 2,000 -> 20,000 rows none of which may go")
