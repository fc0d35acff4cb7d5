"""A batch of plain completions moved to history by one statement outside a transaction.

Why: the storage thread and the worker's event loop share the GIL. The sqlite3 module
lets it go for each step of a statement and takes it back after; while the loop runs
the jobs it just claimed (a stretch of pure Python), each take waits for the whole
stretch. The transactional retire (BEGIN, copy, delete, COMMIT) is four steps, so it
did its work only after the stretch, and the next claim queued behind it. As one
statement in autocommit mode (``job_ack_retire_at_once``: an INSERT into a view whose
INSTEAD OF trigger copies each row to history, deletes it from the hot table and notes
its id) the whole copy and delete is one step, done while the loop runs its stretch.

The view, its trigger and the table of noted ids are TEMP objects of the connection
(``job_ack_retire_setup``), made at first use, so no migration carries them and no
other connection sees them. Every change the statement makes is one of three per row
it moves (no trigger fires on a history insert, none on the delete of a row without
followers), so ``3 * len(batch)`` changes mean every ack moved; otherwise the ids noted
by this statement (the rows past the count noted before it) say which did.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Mapping, Sequence

from ..job_types import JobAck
from .connection import disk_full, split_script

#: Noted ids are cleared once this many have gathered (one DELETE of an in-memory table).
CLEAR_AFTER = 50_000


class Retiring:
    """The one-statement retire on the storage thread's connection (one per storage)."""

    def __init__(self, queries: Mapping[str, str], write_lock: threading.Lock,
                 path: str) -> None:
        self._sql = queries["job_ack_retire_at_once"]
        self._setup = split_script(queries["job_ack_retire_setup"])
        self._lock, self._path = write_lock, path
        self._conn: sqlite3.Connection | None = None  # the one the TEMP objects are on
        self._noted = 0  # rows in conveyor_retired, the rowid of the last one

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
            if conn.total_changes - before == 3 * len(fast):
                moved = {a.id for a in fast}
            else:
                moved = {row[0] for row in conn.execute(
                    "SELECT id FROM conveyor_retired WHERE rowid > ?", (self._noted,))}
            self._noted += len(moved)
            if self._noted >= CLEAR_AFTER:
                conn.execute("DELETE FROM conveyor_retired")
                self._noted = 0
        return moved
