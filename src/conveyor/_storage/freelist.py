"""Connections for the sync API's enqueue, on both backends.

A sync caller talks to the database from its own thread on one of these, not through an
event loop or the SQLite storage thread: a thread hop costs more than the insert.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Generic, Protocol, TypeVar


class _Connection(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=_Connection)


class FreeList(Generic[C]):
    """A plain free list, opened on first use (a pool's checkout costs more CPU than the
    insert). At most ``max_size`` connections at once; one that failed, or that
    ``reusable`` refuses (left inside a transaction), is closed instead of kept.

    Example: ``FreeList(lambda: sqlite3.connect(path), lambda c: not c.in_transaction,
    8, lambda: RuntimeError("busy"))``
    """

    def __init__(self, connect: Callable[[], C], reusable: Callable[[C], bool],
                 max_size: int, exhausted: Callable[[], Exception],
                 fresh: Callable[[C], bool] | None = None) -> None:
        self._connect, self._reusable, self._exhausted = connect, reusable, exhausted
        #: Asked of a free connection before it is handed out; False closes it (the
        #: server hung up on it while it sat idle).
        self._fresh = fresh
        self._free: list[C] = []
        self._slots = threading.BoundedSemaphore(max_size)
        self._closed = False

    @contextlib.contextmanager
    def connection(self, timeout: float) -> Iterator[C]:
        if not self._slots.acquire(timeout=timeout):
            raise self._exhausted()
        conn = None
        try:
            conn = self._take_free()
            if conn is None:
                conn = self._connect()
            yield conn
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        else:
            if self._closed or not self._reusable(conn):
                conn.close()
            else:
                self._free.append(conn)
        finally:
            self._slots.release()

    def _take_free(self) -> C | None:
        while self._free:
            conn = self._free.pop()
            if self._fresh is None or self._fresh(conn):
                return conn
            conn.close()
        return None

    def close(self) -> None:
        self._closed = True
        while self._free:
            self._free.pop().close()
