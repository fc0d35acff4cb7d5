"""SQLite connections and the storage thread.

One dedicated thread owns the storage's connection: every call is one hop to it and
one transaction there, so a batch of jobs costs one hop, never one per job. Writers of
this process (the thread and the sync API's own connections) take one lock around
their transaction instead of meeting SQLITE_BUSY and its millisecond sleeps; write
transactions start with BEGIN IMMEDIATE so that other processes wait on the busy
timeout instead of failing half-way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ..._errors import DatabaseUnavailableError, StorageFullError
from ..wake import WakeHub

T = TypeVar("T")
_STOP = object()


@dataclasses.dataclass(frozen=True, slots=True)
class SQLiteConfig:
    path: str
    busy_timeout: float = 30.0
    #: How often the thread checks whether another connection committed, while a worker
    #: of this process listens (enqueue-to-start latency across processes); 0.5 s else.
    poll_interval: float = 0.005
    #: ``PRAGMA max_page_count`` on every connection; None leaves SQLite's own limit.
    #: The tests set it to make a full disk (SQLITE_FULL) happen for real.
    max_page_count: int | None = None


def _lenient_text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def connect(config: SQLiteConfig) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(config.path, timeout=config.busy_timeout,
                               isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        # Text that is not UTF-8 (written around the API) must not fail every read of
        # its row, claims included: undecodable bytes become U+FFFD.
        conn.text_factory = _lenient_text
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(f"PRAGMA busy_timeout={int(config.busy_timeout * 1000)}")
        conn.execute("PRAGMA foreign_keys=ON")
        # a cancelled dependent cascades through the settle trigger (schema 10)
        conn.execute("PRAGMA recursive_triggers=ON")
        # Statement journals (every UPDATE that fires triggers inside a transaction keeps
        # one) and temp b-trees stay in memory: on files, past 64 KiB each spilled to a
        # temp file opened, written and closed per statement, which made an ack with
        # dependents cost 3x more once its pages outgrew the cache (bench/analysis.md).
        conn.execute("PRAGMA temp_store=MEMORY")
        if config.max_page_count is not None:
            conn.execute(f"PRAGMA max_page_count={int(config.max_page_count)}")
    except sqlite3.Error as exc:
        raise DatabaseUnavailableError(
            f"cannot open SQLite database {config.path!r}: {exc}"
        ) from exc
    return conn


def disk_full(exc: BaseException, path: str) -> StorageFullError | None:
    """The Conveyor error for SQLITE_FULL (a full disk, or max_page_count reached)."""
    if isinstance(exc, sqlite3.Error) and getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
        return StorageFullError(f"the database disk is full ({path}): nothing was written")
    return None


def split_script(script: str) -> list[str]:
    """A migration file as statements (``execute`` runs one at a time)."""
    statements, current = [], ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            if current.strip():
                statements.append(current)
            current = ""
    if current.strip() and not current.strip().startswith("--"):
        statements.append(current)
    return statements


class _Results:
    """Results for one event loop, handed over in bulk: the thread wakes the loop once
    (``call_soon_threadsafe``, a write to its self-pipe) for all the results it settles
    before the loop gets to them, not once per result."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._ready: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []

    def put(self, fut: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
        """On the storage thread."""
        with self._lock:
            self._ready.append((fut, result, exc))
            if len(self._ready) > 1:
                return  # a wake-up is already on its way
        try:
            self._loop.call_soon_threadsafe(self._deliver)
        except RuntimeError:  # the loop is closed: nobody awaits these any more
            with self._lock:
                self._ready.clear()

    def _deliver(self) -> None:
        """On the loop."""
        with self._lock:
            ready, self._ready = self._ready, []
        for fut, result, exc in ready:
            if fut.done():
                continue
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(result)


class StorageThread:
    """The thread that runs every call of one SQLiteStorage on its own connection."""

    def __init__(self, config: SQLiteConfig, hub: WakeHub) -> None:
        self._config, self._hub = config, hub
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._data_version = 0
        self._results: dict[asyncio.AbstractEventLoop, _Results] = {}
        self.write_lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self._thread is not None

    def is_current(self) -> bool:
        return threading.current_thread() is self._thread

    async def start(self) -> None:
        if self._thread is not None:
            return
        conn = await asyncio.to_thread(connect, self._config)
        self._thread = threading.Thread(target=self._serve, args=(conn,),
                                        name="conveyor-sqlite", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self._inbox.put(_STOP)
            await asyncio.to_thread(thread.join)

    def _serve(self, conn: sqlite3.Connection) -> None:
        while True:
            try:
                item = self._inbox.get(timeout=self._config.poll_interval
                                       if self._hub.has_subscribers else 0.5)
            except queue.Empty:
                self._check_foreign_commits(conn)
                continue
            if item is _STOP:
                conn.close()
                return
            fn, results, fut = item
            try:
                result = fn(conn)
            except BaseException as exc:
                results.put(fut, None, exc)
            else:
                results.put(fut, result, None)

    def _check_foreign_commits(self, conn: sqlite3.Connection) -> None:
        """Another process (or connection) committed: wake producers to look."""
        if not self._hub.has_subscribers:
            return
        try:
            version = conn.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.Error:
            return
        if version != self._data_version:
            self._data_version = version
            self._hub.notify("*")

    async def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the thread's connection (outside any transaction)."""
        if self._thread is None:
            raise DatabaseUnavailableError("storage is not open")
        loop = asyncio.get_running_loop()
        results = self._results.get(loop)
        if results is None:
            results = self._results[loop] = _Results(loop)
            for old in list(self._results):  # loops of earlier asyncio.run()s
                if old.is_closed():
                    self._results.pop(old, None)
        fut: asyncio.Future[T] = loop.create_future()
        self._inbox.put((fn, results, fut))
        return await fut

    async def call_write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the thread, in one write transaction."""
        return await self.call(lambda conn: self.write(conn, fn))

    def write(self, conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in one IMMEDIATE transaction on ``conn`` (any thread), retrying
        while another process holds the write lock past the busy timeout, so "database
        is locked" never escapes."""
        with self.write_lock:
            self._begin_immediate(conn)
            try:
                result = fn(conn)
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                full = disk_full(exc, self._config.path)
                if full is not None:
                    raise full from exc
                raise
            return result

    def _begin_immediate(self, conn: sqlite3.Connection) -> None:
        deadline = time.monotonic() + self._config.busy_timeout * 4
        delay = 0.01
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if time.monotonic() > deadline:
                    raise DatabaseUnavailableError(f"SQLite write lock unavailable: {exc}") from exc
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
