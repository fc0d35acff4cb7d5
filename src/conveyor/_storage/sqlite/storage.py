"""The embedded backend: one SQLite file in WAL mode, driven by one dedicated thread.

Every call is one hop to that thread and one transaction there, so a batch of jobs
costs one hop, never one per job. The sync API's inserts are the exception: they run
on a connection of the calling thread (no hop at all), and every in-process writer
takes one lock around its transaction. Write transactions start with BEGIN IMMEDIATE
so that concurrent processes wait on the busy timeout instead of failing half-way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .._errors import DatabaseUnavailableError, SchemaError, unique_held
from .._job import Job
from . import _sqlite_fast
from ._fast import jobs_from_rows
from ._freelist import FreeList
from ._protocol import (
    Capabilities,
    JobAck,
    JobAckManyParams,
    JobCancelParams,
    JobCountByStateParams,
    JobFetchAvailableParams,
    JobGetParams,
    JobHeartbeatManyParams,
    JobHeartbeatResult,
    JobInsert,
    JobInsertManyParams,
    JobListParams,
    JobRescueExpiredParams,
    JobRetryParams,
    JobStageDueParams,
    MigrateParams,
    Migration,
    NodeDeleteParams,
    NodeUpsertParams,
    StagedJob,
    WakeCallback,
)
from ._queries import load_migrations, load_queries
from ._rows import STAGED_STATES, job_from_row, sort_for_claim
from ._sqlite_dashboard import SQLiteDashboardMixin
from ._sqlite_flow import SQLiteFlowMixin
from ._wake import WakeHub

T = TypeVar("T")
_STOP = object()
#: Sync enqueues writing at once from different threads (more wait for a free one).
_CALLER_CONNECTIONS = 32


@dataclasses.dataclass(frozen=True, slots=True)
class SQLiteConfig:
    path: str
    busy_timeout: float = 30.0
    #: How often the thread checks whether another connection committed, while a worker
    #: of this process listens (enqueue-to-start latency across processes); 0.5 s else.
    poll_interval: float = 0.005


def _insert_values(job: JobInsert) -> dict[str, Any]:
    return {
        "task": job.task,
        "queue": job.queue,
        "args": job.args_json,
        "kwargs": job.kwargs_json,
        "priority": job.priority,
        "max_attempts": job.max_attempts,
        "tags": job.tags_json,
        "meta": job.meta_json,
        "delay": job.delay,
        "run_at": job.run_at.timestamp() if job.run_at is not None else None,
        "unique_key": job.unique_key,
        "unique_states": job.unique_states,
        "concurrency_key": job.concurrency_key,
    }


def _lenient_text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _split_script(script: str) -> list[str]:
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


class SQLiteStorage(SQLiteFlowMixin, SQLiteDashboardMixin):
    """Storage on one SQLite file. Example: ``SQLiteStorage(SQLiteConfig("jobs.db"), WakeHub())``"""

    def __init__(self, config: SQLiteConfig, hub: WakeHub) -> None:
        self._config = config
        self._hub = hub
        self._q = load_queries("sqlite")
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._conn: sqlite3.Connection | None = None
        self._data_version = 0
        #: The sync API's own connections; in-process writers queue on ``_write_lock``
        #: instead of meeting SQLITE_BUSY and its millisecond sleeps.
        self._callers: FreeList[sqlite3.Connection] = FreeList(
            self._connect, lambda conn: not conn.in_transaction, _CALLER_CONNECTIONS,
            lambda: DatabaseUnavailableError("no free SQLite connection for the sync enqueue"))
        self._write_lock = threading.Lock()
        self._capabilities = Capabilities(
            dialect="sqlite",
            listen_notify=False,
            skip_locked=False,
            poll_interval=max(config.poll_interval * 40, 0.2),
            transactional_enqueue=True,
        )

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    # -- the dedicated thread -------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self._config.path,
                timeout=self._config.busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.row_factory = sqlite3.Row
            # Text that is not UTF-8 (written around the API) must not fail every read of
            # its row, claims included: undecodable bytes become U+FFFD.
            conn.text_factory = _lenient_text
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA busy_timeout={int(self._config.busy_timeout * 1000)}")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as exc:
            raise DatabaseUnavailableError(
                f"cannot open SQLite database {self._config.path!r}: {exc}"
            ) from exc
        return conn

    def _serve(self) -> None:
        conn = self._conn
        assert conn is not None
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
            fn, done = item
            try:
                result = fn(conn)
            except BaseException as exc:
                done(None, exc)
            else:
                done(result, None)

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

    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._thread is None:
            raise DatabaseUnavailableError("storage is not open")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()

        def settle(result: Any, exc: BaseException | None) -> None:
            def apply() -> None:
                if fut.done():
                    return
                if exc is not None:
                    fut.set_exception(exc)
                else:
                    fut.set_result(result)

            loop.call_soon_threadsafe(apply)

        self._inbox.put((fn, settle))
        return await fut

    def _write(self, conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in one IMMEDIATE transaction, retrying while another process holds
        the write lock past the busy timeout, so "database is locked" never escapes."""
        with self._write_lock:
            self._begin_immediate(conn)
            try:
                result = fn(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
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

    # -- lifecycle --------------------------------------------------------------------

    async def open(self, *, check_schema: bool = True) -> None:
        """The embedded database migrates itself: there is no operator to ask."""
        if self._thread is not None:
            return
        self._conn = await asyncio.to_thread(self._connect)
        self._thread = threading.Thread(target=self._serve, name="conveyor-sqlite", daemon=True)
        self._thread.start()
        if check_schema:
            await self.migrate(MigrateParams())

    async def close(self) -> None:
        thread, self._thread = self._thread, None
        self._callers.close()
        if thread is not None:
            self._inbox.put(_STOP)
            await asyncio.to_thread(thread.join)

    # -- schema ---------------------------------------------------------------------------

    def _pending(self, conn: sqlite3.Connection) -> list[Migration]:
        """Read-only, so that a dry run writes nothing."""
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'conveyor_migrations'"
        ).fetchone()
        done = {row[0] for row in conn.execute("SELECT version FROM conveyor_migrations")
                } if exists else set()
        known = load_migrations("sqlite")
        if done and max(done) > len(known):
            raise SchemaError(
                f"the database schema is at version {max(done)}, newer than this Conveyor "
                f"knows ({len(known)}); upgrade Conveyor"
            )
        return [m for m in known if m.version not in done]

    async def schema_pending(self) -> list[Migration]:
        return await self._call(lambda c: self._write(c, self._pending))

    async def migrate(self, params: MigrateParams) -> list[Migration]:
        def run(conn: sqlite3.Connection) -> list[Migration]:
            pending = self._pending(conn)
            if params.dry_run:
                return pending
            conn.execute(
                "CREATE TABLE IF NOT EXISTS conveyor_migrations ("
                "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
            )
            for migration in pending:
                for statement in _split_script(migration.sql):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO conveyor_migrations (version, name, applied_at) "
                    "VALUES (?, ?, (julianday('now') - 2440587.5) * 86400.0)",
                    (migration.version, migration.name),
                )
            return pending

        return await self._call(lambda c: self._write(c, run))

    # -- jobs ---------------------------------------------------------------------------

    def _insert_rows(self, conn: sqlite3.Connection, params: JobInsertManyParams) -> list[Job]:
        if all(job.unique_key is None for job in params.jobs):  # one executemany
            return _sqlite_fast.insert_plain(conn, self._q, params.jobs)
        sql, out = self._q["job_insert"], []
        for job in params.jobs:
            row = conn.execute(sql, _insert_values(job)).fetchone()
            if row is None:  # a live job holds the unique key: return it instead
                row = conn.execute(self._q["job_get_unique"], {"unique_key": job.unique_key})
                out.append(dataclasses.replace(
                    job_from_row(row.fetchone(), json_text=True), duplicate=True))
            else:
                out.append(job_from_row(row, json_text=True))
        return out

    async def job_insert_many(
        self, params: JobInsertManyParams, connection: Any = None
    ) -> list[Job]:
        if connection is not None:
            return self.job_insert_many_sync(params, connection)
        jobs = await self._call(lambda c: self._write(c, lambda c2: self._insert_rows(c2, params)))
        for queue_name in {j.queue for j in jobs}:
            self._hub.notify(queue_name)
        return jobs

    def job_insert_many_blocking(self, params: JobInsertManyParams) -> list[Job]:
        if self._thread is None or threading.current_thread() is self._thread:
            raise DatabaseUnavailableError("storage is not open")
        with self._callers.connection(self._config.busy_timeout) as conn:
            jobs = self._write(conn, lambda c: self._insert_rows(c, params))
        for queue_name in {j.queue for j in jobs}:
            self._hub.notify(queue_name)
        return jobs

    def job_insert_many_sync(self, params: JobInsertManyParams, connection: Any) -> list[Job]:
        if not isinstance(connection, sqlite3.Connection):
            raise TypeError(
                "connection= on the SQLite backend must be a sqlite3.Connection to the same file"
            )
        previous = connection.row_factory
        connection.row_factory = sqlite3.Row
        try:
            return self._insert_rows(connection, params)
        finally:
            connection.row_factory = previous

    async def job_fetch_available(self, params: JobFetchAvailableParams) -> list[Job]:
        values = {
            "queue": params.queue,
            "limit": params.limit,
            "owner": params.owner,
            "lease_ttl": params.lease_ttl,
        }

        def run(conn: sqlite3.Connection) -> _sqlite_fast.Rows:
            return _sqlite_fast.claim(conn, self._q["job_fetch_available"], values)

        # decoded here, not on the storage thread: it can start the next statement
        columns, rows = await self._call(lambda c: self._write(c, run))
        return sort_for_claim(jobs_from_rows(columns, rows, json_text=True))

    async def job_ack_many(self, params: JobAckManyParams) -> list[int]:
        sql = self._q["job_ack"]

        def exact(conn: sqlite3.Connection, acks: Sequence[JobAck]) -> list[int]:
            applied = []
            for ack in acks:
                row = conn.execute(
                    sql,
                    {
                        "id": ack.id,
                        "lease_token": ack.lease_token,
                        "state": ack.state.value,
                        "delay": ack.delay,
                        "result": ack.result_json,
                        "error": ack.error_json,
                        "attempt_delta": ack.attempt_delta,
                    },
                ).fetchone()
                if row is not None:
                    applied.append(row["id"])
                    if row["state"] == "available":
                        self._hub.notify(row["queue"])
            return applied

        def run(conn: sqlite3.Connection) -> list[int]:  # plain completions in one statement
            return _sqlite_fast.ack_many(conn, self._q["job_ack_completed"], params.acks,
                                         lambda acks: exact(conn, acks))

        return await self._call(lambda c: self._write(c, run))

    async def job_heartbeat_many(self, params: JobHeartbeatManyParams) -> JobHeartbeatResult:
        sql = self._q["job_heartbeat"]

        def run(conn: sqlite3.Connection) -> JobHeartbeatResult:
            held, cancel = set(), set()
            for lease in params.leases:
                row = conn.execute(
                    sql, {"id": lease.id, "lease_token": lease.lease_token,
                          "lease_ttl": params.lease_ttl}
                ).fetchone()
                if row is not None:
                    held.add(row["id"])
                    if row["cancel_requested"]:
                        cancel.add(row["id"])
            return JobHeartbeatResult(frozenset(held), frozenset(cancel))

        return await self._call(lambda c: self._write(c, run))

    async def job_rescue_expired(self, params: JobRescueExpiredParams) -> list[int]:
        def run(conn: sqlite3.Connection) -> list[int]:
            rows = conn.execute(
                self._q["job_rescue_expired"],
                {"limit": params.limit, "error": params.error_json, "node_ttl": params.node_ttl},
            ).fetchall()
            return [r["id"] for r in rows]

        ids = await self._call(lambda c: self._write(c, run))
        if ids:
            self._hub.notify("*")
        return ids

    async def job_stage_due(self, params: JobStageDueParams) -> list[StagedJob]:
        def run(conn: sqlite3.Connection) -> list[StagedJob]:
            staged = []
            for previous in STAGED_STATES:
                values = {"limit": params.limit, "from_state": previous.value}
                for r in conn.execute(self._q["job_stage_due"], values).fetchall():
                    staged.append(StagedJob(r["id"], r["task"], r["queue"], r["attempt"], previous))
            return staged

        staged = await self._call(lambda c: self._write(c, run))
        for queue_name in {j.queue for j in staged}:
            self._hub.notify(queue_name)
        return staged

    async def _one(self, name: str, values: dict[str, Any], write: bool) -> Job | None:
        def run(conn: sqlite3.Connection) -> Job | None:
            row = conn.execute(self._q[name], values).fetchone()
            return job_from_row(row, json_text=True) if row is not None else None

        if write:
            return await self._call(lambda c: self._write(c, run))
        return await self._call(run)

    async def job_get(self, params: JobGetParams) -> Job | None:
        return await self._one("job_get", {"id": params.id}, write=False)

    async def job_list(self, params: JobListParams) -> list[Job]:
        values = {
            "state": params.state.value if params.state else None,
            "queue": params.queue,
            "task": params.task,
            "before_id": params.before_id,
            "limit": params.limit,
        }

        def run(conn: sqlite3.Connection) -> list[Job]:
            rows = conn.execute(self._q["job_list"], values).fetchall()
            return [job_from_row(r, json_text=True) for r in rows]

        return await self._call(run)

    async def job_retry(self, params: JobRetryParams) -> Job | None:
        try:
            job = await self._one("job_retry", {"id": params.id}, write=True)
        except sqlite3.IntegrityError:  # the unique index: another live job holds the key
            raise unique_held(params.id) from None
        if job is not None:
            self._hub.notify(job.queue)
        return job

    async def job_cancel(self, params: JobCancelParams) -> Job | None:
        return await self._one("job_cancel", {"id": params.id}, write=True)

    async def job_count_by_state(self, params: JobCountByStateParams) -> dict[str, int]:
        def run(conn: sqlite3.Connection) -> dict[str, int]:
            rows = conn.execute(self._q["job_count_by_state"], {"queue": params.queue})
            return {r["state"]: r["n"] for r in rows}

        return await self._call(run)

    # -- nodes ----------------------------------------------------------------------------

    async def node_upsert(self, params: NodeUpsertParams) -> None:
        values = dataclasses.asdict(params)
        values["queues"] = values.pop("queues_json")
        values["tasks"] = values.pop("tasks_json")
        await self._call(lambda c: self._write(c, lambda c2: c2.execute(self._q["node_upsert"],
                                                                         values)))

    async def node_delete(self, params: NodeDeleteParams) -> None:
        await self._call(
            lambda c: self._write(c, lambda c2: c2.execute(self._q["node_delete"], {"id": params.id}))
        )

    def wake_subscribe(self, callback: WakeCallback) -> Callable[[], None]:
        return self._hub.subscribe(callback)
