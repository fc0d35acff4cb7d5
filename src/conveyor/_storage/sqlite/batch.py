"""SQLite batch paths: one ``executemany`` per batch instead of one statement per job.

All of them run inside the caller's write transaction: on the storage thread, or on
the connection of a sync caller's own thread.

* Plain inserts (no unique key in the batch) go in with one ``executemany`` and no
  RETURNING. Their ids are contiguous: the table is ``AUTOINCREMENT``, so each new
  rowid is one more than the largest ever used, and no other writer can interleave
  while this transaction holds the write lock. The Jobs are built from what was sent.
* Claims read tuple rows of only the columns a worker needs, not ``sqlite3.Row``;
  the caller makes them Jobs (``rows.claimed_from_seconds``), arguments undecoded.
* Completed acks without an error (nearly all of them) are one statement over a JSON
  array, not an ``executemany``: each execution of a statement on this table sets up
  its trigger programs and the state CHECK's list again, which cost more than the
  update itself. When its row count shows a fence rejected some of them, the savepoint
  is rolled back and the batch takes the exact per-row path, which reports each
  rejection.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..._job import Job
from ..job_types import JobAck, JobInsert
from ..rows import Timestamps, jobs_from_inserts, plain_completed

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Inserted:
    """What a plain batch wrote, in input order: its ids and the rows sent (``rows`` in
    ``job_insert_plain``'s parameter order: state and due time included)."""

    ids: range
    rows: list[tuple[Any, ...]]

    def jobs(self, inserts: Sequence[JobInsert]) -> list[Job]:
        """The Jobs written, built from what was sent (the shared creation time, which
        most jobs are also due at, converted once)."""
        rows, ts = self.rows, Timestamps()
        if not rows:
            return []
        now = rows[0][10]
        made = ts(now)
        return jobs_from_inserts(inserts, self.ids, [r[8] for r in rows],
                                 [made if r[9] == now else ts(r[9]) for r in rows],
                                 [made] * len(rows))


def insert_plain(conn: sqlite3.Connection, queries: Mapping[str, str],
                 jobs: Sequence[JobInsert]) -> Inserted:
    """Insert jobs that carry no unique key, with one ``executemany``."""
    cur = conn.cursor()
    now = cur.execute(queries["clock_now"]).fetchone()[0]
    rows: list[tuple[Any, ...]] = []
    add = rows.append
    for j in jobs:
        if j.run_at is None and not j.delay:  # the common case: due now
            state, due = "available", now
        else:
            due = j.run_at.timestamp() if j.run_at is not None else now + (j.delay or 0.0)
            state = "scheduled" if due > now else "available"
        add((j.task, j.queue, j.args_json, j.kwargs_json, j.priority, j.max_attempts,
             j.tags_json, j.meta_json, state, due, now, j.concurrency_key))
    cur.executemany(queries["job_insert_plain"], rows)
    last = cur.execute("SELECT last_insert_rowid()").fetchone()[0] if rows else 0
    return Inserted(range(last - len(rows) + 1, last + 1), rows)


def claim(conn: sqlite3.Connection, sql: str, values: Mapping[str, Any]) -> list[Any]:
    """Run the claim; its tuple rows (``rows.CLAIM_COLUMNS`` in order), to be made
    Jobs with ``rows.claimed_from_seconds`` off the storage thread."""
    cur = conn.cursor()
    cur.row_factory = None
    return cur.execute(sql, values).fetchall()


def _plain(ack: JobAck) -> bool:
    """One the batch statement writes: a plain completion whose result survives the trip
    through a JSON string (SQLite's ``->>`` stops text at a NUL; JSON results carry
    none, but a result is only text)."""
    return plain_completed(ack) and (ack.result_json is None or "\x00" not in ack.result_json)


def ack_many(conn: sqlite3.Connection, sql_completed: str, acks: Sequence[JobAck],
             node: str | None, exact: Callable[[Sequence[JobAck]], list[int]]) -> list[int]:
    """Apply fenced acks; ``exact`` is the per-row path (one statement per ack)."""
    fast = [a for a in acks if _plain(a)]
    if len(fast) < 2 or len({a.id for a in acks}) != len(acks):
        return exact(acks)  # tiny batch, or one job twice: keep the in-order semantics
    rest = [a for a in acks if not _plain(a)]
    conn.execute("SAVEPOINT conveyor_ack")  # an error rolls the whole transaction back
    rows = json.dumps([(a.id, a.lease_token, a.result_json, a.run_time) for a in fast],
                      ensure_ascii=False)
    done = conn.execute(sql_completed, {"acks": rows, "node": node}).rowcount
    if done != len(fast):  # some fence held: find out which, row by row
        conn.execute("ROLLBACK TO conveyor_ack")
        conn.execute("RELEASE conveyor_ack")
        return exact(acks)
    conn.execute("RELEASE conveyor_ack")
    applied = set(exact(rest)) if rest else set()
    applied.update(a.id for a in fast)
    return [a.id for a in acks if a.id in applied]
