"""SQLite batch paths: one ``executemany`` per batch instead of one statement per job.

All of them run inside the caller's write transaction: on the storage thread, or on
the connection of a sync caller's own thread.

* Plain inserts (no unique key in the batch) go in with no RETURNING: jobs alike but
  for their arguments (a batch of ``task.job`` calls) in one statement over a JSON
  array of them, others with one ``executemany``. Their ids are contiguous: the table
  is ``AUTOINCREMENT``, so each new rowid is one more than the largest ever used, and
  no other writer can interleave while this transaction holds the write lock. The
  Jobs are built from what was sent.
* Claims read tuple rows of only the columns a worker needs, not ``sqlite3.Row``;
  the caller makes them Jobs (``rows.claimed_from_seconds``), arguments undecoded.
* Completed acks without an error (nearly all of them) are one statement over a JSON
  array, not an ``executemany``: each execution of a statement on this table sets up
  its trigger programs and the state CHECK's list again, which cost more than the
  update itself. When its row count shows a fence rejected some of them, the savepoint
  is rolled back and those acks take the exact per-row path, which reports each
  rejection. A worker whose ``archive_after`` is 0 first moves those the archiving rule
  lets go straight to history (``job_ack_retire``: a copy whose row count says whether
  every fence held, and a delete), so only the others are updated. A batch of plain
  completions alone is first moved in one statement outside a transaction
  (``retiring.py``), and only what stays comes here. Which acks take which
  path, and their JSON, are worked out before the storage thread takes the batch
  (``plan_acks``, on the caller's loop): that thread is a drain's busiest part, and the
  loop has time while the thread runs SQL.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..._job import Job
from ..inserted import jobs_from_inserts
from ..job_types import JobAck, JobInsert
from ..rows import Timestamps, plain_completed

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Inserted:
    """What a plain batch wrote, in input order: its ids, states and due times (unix
    seconds), and the creation time they share."""

    ids: range
    states: Sequence[str]
    due: Sequence[float]
    now: float

    def jobs(self, inserts: Sequence[JobInsert]) -> list[Job]:
        """The Jobs written, built from what was sent (the shared creation time, which
        most jobs are also due at, converted once)."""
        if not inserts:
            return []
        ts, now = Timestamps(), self.now
        made = ts(now)
        return jobs_from_inserts(inserts, self.ids, self.states,
                                 [made if d == now else ts(d) for d in self.due],
                                 [made] * len(inserts))


def insert_plain(conn: sqlite3.Connection, queries: Mapping[str, str],
                 jobs: Sequence[JobInsert]) -> Inserted:
    """Insert jobs that carry no unique key: jobs alike but for their arguments in one
    statement over a JSON array (``job_insert_alike``), others with one ``executemany``."""
    cur = conn.cursor()
    now = cur.execute(queries["clock_now"]).fetchone()[0]
    if len(jobs) > 1 and _alike(jobs):
        done = _insert_alike(cur, queries["job_insert_alike"], jobs, now)
        if done is not None:
            return done
    rows: list[tuple[Any, ...]] = []
    add = rows.append
    for j in jobs:
        state, due = _when(j, now)
        add((j.task, j.queue, j.args_json, j.kwargs_json, j.priority, j.max_attempts,
             j.tags_json, j.meta_json, state, due, now, j.concurrency_key))
    cur.executemany(queries["job_insert_plain"], rows)
    last = cur.execute("SELECT last_insert_rowid()").fetchone()[0] if rows else 0
    return Inserted(range(last - len(rows) + 1, last + 1), [r[8] for r in rows],
                    [r[9] for r in rows], now)


def _when(job: JobInsert, now: float) -> tuple[str, float]:
    """A job's state and due time, as ``job_insert`` computes them."""
    if job.run_at is None and not job.delay:  # the common case: due now
        return "available", now
    due = job.run_at.timestamp() if job.run_at is not None else now + (job.delay or 0.0)
    return ("scheduled" if due > now else "available"), due


def _alike(jobs: Sequence[JobInsert]) -> bool:
    """Every job the first one but for its arguments (``task.job`` in a loop)."""
    first = jobs[0]
    shared = (first.task, first.queue, first.priority, first.max_attempts, first.tags_json,
              first.meta_json, first.concurrency_key, first.delay, first.run_at)
    return all((j.task, j.queue, j.priority, j.max_attempts, j.tags_json, j.meta_json,
                j.concurrency_key, j.delay, j.run_at) == shared for j in jobs)


_dump_texts = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


#: Characters of ``:calls`` above which a batch takes ``executemany`` instead: far below
#: SQLite's cap on one value (SQLITE_MAX_LENGTH, 1e9 bytes by default), which rows of
#: large arguments could reach, and past the size where one statement saves much.
MAX_CALLS_TEXT = 16 << 20


def _insert_alike(cur: sqlite3.Cursor, sql: str, jobs: Sequence[JobInsert], now: float
                  ) -> Inserted | None:
    """``job_insert_alike``: only the positional arguments vary (the keyword arguments
    are alike too), an array of ``args_json`` strings; otherwise an array of
    ``[args_json, kwargs_json]``. The JSON text of the arguments holds no NUL
    (``_payload`` refuses one), which SQLite's JSON functions would stop a string at.
    None: too large, nothing written."""
    first = jobs[0]
    state, due = _when(first, now)
    kwargs = first.kwargs_json
    if all(j.kwargs_json == kwargs for j in jobs):
        calls = _dump_texts([j.args_json for j in jobs])
    else:
        calls = _dump_texts([(j.args_json, j.kwargs_json) for j in jobs])
    if len(calls) > MAX_CALLS_TEXT:
        return None
    cur.execute(sql, {
        "task": first.task, "queue": first.queue, "kwargs": kwargs,
        "priority": first.priority, "max_attempts": first.max_attempts,
        "tags": first.tags_json, "meta": first.meta_json, "state": state, "due": due,
        "now": now, "concurrency_key": first.concurrency_key, "calls": calls})
    count = len(jobs)
    if cur.rowcount != count:  # pragma: no cover - a row the JSON array did not carry
        raise RuntimeError(f"inserted {cur.rowcount} rows of a batch of {count}")
    last = cur.execute("SELECT last_insert_rowid()").fetchone()[0]
    return Inserted(range(last - count + 1, last + 1), [state] * count, [due] * count, now)


class UndecodableText(Exception):
    """A claimed row holds text that is not UTF-8: claim again with ``lenient``."""


def claim(conn: sqlite3.Connection, sql: str, values: Mapping[str, Any],
          lenient: bool = False) -> list[Any]:
    """Run the claim; its tuple rows (``rows.CLAIM_COLUMNS`` in order), to be made
    Jobs with ``rows.claimed_from_seconds`` off the storage thread.

    Text is decoded by ``str``, in C, not by the connection's lenient factory, a Python
    call per text value (0.5 µs per claimed job, on the drain's busiest thread). A row
    with bytes that are not UTF-8 (written around the API) raises UndecodableText, the
    transaction rolls back, and the caller claims again with ``lenient``."""
    cur = conn.cursor()
    cur.row_factory = None
    if lenient:
        return cur.execute(sql, values).fetchall()
    factory, conn.text_factory = conn.text_factory, str
    try:
        return cur.execute(sql, values).fetchall()
    except sqlite3.OperationalError as exc:
        cur.close()  # ends the statement, which the failed fetch left in progress
        if str(exc).startswith("Could not decode to UTF-8"):
            raise UndecodableText(str(exc)) from exc
        raise
    finally:
        conn.text_factory = factory


def _plain(ack: JobAck) -> bool:
    """One the batch statement writes: a plain completion whose result survives the trip
    through a JSON string (SQLite's ``->>`` stops text at a NUL; JSON results carry
    none, but a result is only text)."""
    return plain_completed(ack) and (ack.result_json is None or "\x00" not in ack.result_json)


@dataclass(frozen=True, slots=True)
class AckPlan:
    """A batch of acks sorted before it reaches the storage thread (``plan_acks``): the
    plain completions one statement writes and their ``:acks`` JSON, and the rest,
    which take the per-row path. No plain ones: the whole batch goes row by row."""

    acks: Sequence[JobAck]
    retire: bool
    fast: list[JobAck]
    fast_json: str
    rest: list[JobAck]


def plan_acks(acks: Sequence[JobAck], retire: bool = False) -> AckPlan:
    """``retire``: plain completions the archiving rule lets go move to history at once
    (``_retire``), one job alone too (else history would wait for the archiver). A tiny
    batch, or one holding a job twice, keeps the in-order per-row semantics."""
    fast = [a for a in acks if _plain(a)]
    if len(fast) < (1 if retire else 2) or len({a.id for a in acks}) != len(acks):
        return AckPlan(acks, retire, [], "", list(acks))
    rest = [a for a in acks if not _plain(a)] if len(fast) < len(acks) else []
    return AckPlan(acks, retire, fast, _acks_json(fast), rest)


def ack_many(conn: sqlite3.Connection, queries: Mapping[str, str], plan: AckPlan,
             node: str | None, exact: Callable[[Sequence[JobAck]], list[int]]) -> list[int]:
    """Apply fenced acks as ``plan`` sorted them; ``exact`` is the per-row path (one
    statement per ack). The ids that applied, in the acks' order."""
    if not plan.fast:
        return exact(plan.acks)
    fast, text, rest = plan.fast, plan.fast_json, plan.rest
    moved = _retire(conn, queries, fast, text, node) if plan.retire else set()
    if moved and len(moved) == len(fast) and not rest:
        return [a.id for a in fast]  # the usual: every ack moved to history at once
    if moved:  # some stayed hot (the archiving rule, followers): the update takes them
        fast = [a for a in fast if a.id not in moved]
        text = _acks_json(fast) if fast else ""
    applied = set(moved)
    if fast:
        conn.execute("SAVEPOINT conveyor_ack")  # an error rolls the whole transaction back
        done = conn.execute(queries["job_ack_completed"], {"acks": text, "node": node}).rowcount
        if done != len(fast):  # some fence held: find out which, row by row
            conn.execute("ROLLBACK TO conveyor_ack")
            conn.execute("RELEASE conveyor_ack")
            rest = [a for a in plan.acks if a.id not in moved]
        else:
            conn.execute("RELEASE conveyor_ack")
            applied.update(a.id for a in fast)
    if rest:
        applied.update(exact(rest))
    return [a.id for a in plan.acks if a.id in applied]


def _retire(conn: sqlite3.Connection, queries: Mapping[str, str], fast: Sequence[JobAck],
            text: str, node: str | None) -> set[int]:
    """Copy the plain completions the archiving rule lets go into history, as the update
    would have left them, then delete what was copied; the ids moved (their fence held).
    ``fast`` holds each id once, so a copy of as many rows as acks moved every one."""
    copied = conn.execute(queries["job_ack_retire"], {"acks": text, "node": node}).rowcount
    if copied == len(fast):
        conn.execute(queries["job_ack_retire_delete_all"], {"acks": text})
        return {a.id for a in fast}
    if not copied:
        return set()
    deleted = conn.execute(queries["job_ack_retire_delete"], {"acks": text})
    return {row[0] for row in deleted.fetchall()}


def _acks_json(acks: Sequence[JobAck]) -> str:
    """``:acks`` of the batch statements: [id, lease_token, result, run_time] each."""
    return json.dumps([(a.id, a.lease_token, a.result_json, a.run_time) for a in acks],
                      ensure_ascii=False)
