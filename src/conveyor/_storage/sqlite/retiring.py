"""A batch of plain completions moved to history by one statement outside a transaction.

Why: the storage thread and the worker's event loop share the GIL. The sqlite3 module
lets it go for each step of a statement and takes it back after; while the loop runs
the jobs it just claimed (a stretch of pure Python), each take waits for the whole
stretch. The transactional retire (BEGIN, copy, delete, COMMIT) is four steps, so it
did its work only after the stretch, and the next claim queued behind it. As one
statement in autocommit mode (``job_ack_retire_at_once``: the batch inserted as one row
into a view whose INSTEAD OF trigger copies it to history, notes the ids copied and
deletes them from the hot table, set-based as the transactional path) the whole move
is one step, done while the loop runs its stretch.

The view, its trigger and the table of noted ids are TEMP objects of the connection
(``job_ack_retire_setup``), made at first use, so no migration carries them and no
other connection sees them. Every change the statement makes is one of three per row
it moves (copy, note, delete: no trigger fires on a history insert, none on the delete
of a row without followers) or the clearing of the last batch's notes, so
``last + 3 * len(batch)`` changes mean every ack moved; otherwise the notes say which.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Mapping, Sequence

from ..job_types import JobAck
from .connection import disk_full, split_script


def setup_statements(queries: Mapping[str, str]) -> list[str]:
    """``job_ack_retire_setup`` as statements: a trigger takes no parameters, so the
    copy it shares with ``job_ack_retire`` reads the inserted row's columns instead."""
    setup = queries["job_ack_retire_setup"]
    return split_script(setup.replace(":acks", "NEW.acks").replace(":node", "NEW.node"))


class Retiring:
    """The one-statement retire on the storage thread's connection (one per storage)."""

    def __init__(self, queries: Mapping[str, str], write_lock: threading.Lock,
                 path: str) -> None:
        self._sql = queries["job_ack_retire_at_once"]
        self._setup = setup_statements(queries)
        self._lock, self._path = write_lock, path
        self._conn: sqlite3.Connection | None = None  # the one the TEMP objects are on
        self._noted = 0  # rows in conveyor_retired, which the next move clears first

    def move(self, conn: sqlite3.Connection, fast: Sequence[JobAck], text: str,
             node: str | None) -> set[int] | None:
        """Move the plain completions of ``fast`` (``:acks`` JSON ``text``) whose fence
        holds and that the archiving rule lets go; the ids moved. None: nothing was
        written, take the transactional path (a transaction is open, or another
        process held the write lock past the busy timeout)."""
        if conn.in_transaction:
            return None
        with self._lock:
            if self._conn is not conn:
                for statement in self._setup:
                    conn.execute(statement)
                self._conn, self._noted = conn, 0
            before = conn.total_changes
            try:
                conn.execute(self._sql, {"acks": text, "node": node})
            except sqlite3.Error as exc:
                if isinstance(exc, sqlite3.OperationalError) and (
                        "locked" in str(exc) or "busy" in str(exc)):
                    return None  # autocommit: the statement wrote nothing
                full = disk_full(exc, self._path)
                if full is not None:
                    raise full from exc
                raise
            if conn.total_changes - before == self._noted + 3 * len(fast):
                moved = {a.id for a in fast}
            else:
                moved = {row[0] for row in conn.execute("SELECT id FROM conveyor_retired")}
            self._noted = len(moved)
        return moved
