"""``python -m bench.retention URL``: history retention on PostgreSQL, dropping one day's
partition against deleting the same number of rows the way the pruner deletes what no
partition covers (batches of 1,000 through ``job_history_prune``'s shape).

URL must name a migrated database whose name contains 'bench' or 'test': its history
is emptied. Prints both times and the dead tuples the row deletes left for vacuum.
"""

from __future__ import annotations

import sys
import time

import psycopg

ROWS = 300_000
#: Completed jobs finished ``age`` ago, ids from ``first``; with no partition for their
#: day they land in the DEFAULT partition.
_FILL = """
INSERT INTO conveyor_jobs_history (id, task, queue, args, kwargs, priority, state, attempt,
    max_attempts, scheduled_at, created_at, attempted_at, finished_at, errors, result, tags,
    meta, cancel_requested, holds_slot)
SELECT %(first)s + i, 'noop', 'bench', jsonb_build_array(i), '{}', 0, 'completed', 1, 20,
    now() - %(age)s::interval, now() - %(age)s::interval, now() - %(age)s::interval,
    now() - %(age)s::interval, '[]', 'null', '[]', '{}', false, false
FROM generate_series(1, %(rows)s) AS i"""
_PRUNE_BATCH = """
DELETE FROM conveyor_jobs_history WHERE id = ANY(ARRAY(
    SELECT id FROM conveyor_jobs_history
    WHERE state IN ('completed', 'cancelled') AND finished_at < now() - interval '5 days'
    LIMIT 1000 FOR UPDATE SKIP LOCKED))
RETURNING id"""


def main(url: str) -> None:
    if "bench" not in url and "test" not in url:
        raise SystemExit("give a database whose name contains 'bench' or 'test' (it is emptied)")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE conveyor_jobs_history")
        conn.execute("SELECT conveyor_history_prepare(now() - interval '10 days', 0)")
        conn.execute(_FILL, {"first": 10**9, "age": "10 days", "rows": ROWS})
        conn.execute(_FILL, {"first": 2 * 10**9, "age": "20 days", "rows": ROWS})
        conn.execute("VACUUM ANALYZE conveyor_jobs_history")
        began = time.perf_counter()
        row = conn.execute(
            "SELECT conveyor_history_drop('done', now() - interval '5 days')").fetchone()
        drop = time.perf_counter() - began
        print(f"drop one day's partition: {row[0] if row else 0} rows in {drop * 1000:.0f} ms")
        began, deleted = time.perf_counter(), 0
        while True:
            got = len(conn.execute(_PRUNE_BATCH).fetchall())
            deleted += got
            if got < 1000:
                break
        rows = time.perf_counter() - began
        dead = conn.execute("SELECT n_dead_tup FROM pg_stat_user_tables "
                            "WHERE relname = 'conveyor_jobs_history_done_default'").fetchone()
        print(f"delete by row (batches of 1,000): {deleted} rows in {rows * 1000:.0f} ms "
              f"({rows / drop:.0f}x), {dead[0] if dead else '?'} dead tuples left for vacuum")


if __name__ == "__main__":
    main(sys.argv[1])
