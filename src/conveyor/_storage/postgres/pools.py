"""The PostgreSQL backend's connections: the pools (a reserved one for the writes a
worker must not lose), the LISTEN connections, how a named statement runs (prepared
after a few uses, never behind a transaction pooler), opening, closing and the schema
check. ``PostgresStorage`` (storage.py) adds the statements' paths on top.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar

import psycopg
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from ..._errors import DatabaseUnavailableError, SchemaError
from ..._job import JobState
from ..base import changed_jobs
from ..fair_storage import FairStorage
from ..freelist import FreeList
from ..job_types import (
    JobBulkParams,
    JobChanged,
    JobFilter,
)
from ..schema import DbHealth, Migration, pending_migrations
from ..wake import WakeCallback, WakeHub
from . import schema
from .connection import (
    BlockingConnection,
    Errors,
    PooledConnection,
    PostgresConfig,
    configure,
    configure_blocking,
    connect_kwargs,
    is_pooler_error,
    pooler_detected_message,
    prepare_threshold,
    server_hung_up,
    shares_server_sessions,
)
from .listener import Listener, finished_channel

log = logging.getLogger("conveyor.postgres")
#: The redacted URLs this process has warned about finding a pooler on: once each, not
#: once per storage (an app opens one per event loop).
_POOLER_WARNED: set[str] = set()
Conn = PooledConnection
_CHANNEL = re.compile(r"[a-z_][a-z0-9_]{0,62}")  # fullmatch: no trailing newline
#: Hot statements (claim, ack, heartbeat) are prepared after this many uses.
_PREPARE_THRESHOLD = 5
#: Statements that use the reserved connections: a worker that cannot send them loses
#: its leases (rescue, duplicate run) or holds finished jobs in limbo.
_RESERVED = frozenset({"job_ack", "job_ack_completed", "job_heartbeat", "node_upsert"})
#: Seconds a statement waits for a pooled connection while the database looks down
#: (``_conn``), instead of the pool's 30: callers (a dashboard page, a worker's claim)
#: hear "unavailable" at once and nothing waits on a server that refuses.
_DOWN_WAIT = 0.5
#: How long the statement after a stale connection waits for a fresh one: a restarted
#: server answers in milliseconds; one that is still down is reported in seconds, not
#: after the pool's 30 s.
_RECONNECT_WAIT = 2.0
#: The pool's counters of connections that failed to open, broke in use, or failed its check.
_FAILURE_STATS = ("connections_errors", "returns_bad", "connections_lost")
#: Never prepared: a generic plan for "x IS NULL OR col = x" cannot pick an index.
_UNPREPARED = frozenset({
    "job_list", "job_count_by_state", "node_list", "job_search", "job_search_newer",
    "job_count_capped", "job_count_by_queue", "job_count_final_capped", "job_failure_groups",
    "job_count_running_by_node", "metrics_series", "metrics_totals", "metrics_depth_series",
    "metrics_depth_sample", "job_pick_matching", "job_history_pick_matching",
    "job_count_requiring",
})



class PostgresPools(FairStorage):
    """The PostgreSQL backend's pools, its LISTEN connections, the statements' runner
    (reserved connections for the hot writes, prepared or not), its lifecycle and schema
    checks: everything ``PostgresStorage`` runs its statements through."""

    dialect: ClassVar[str] = "postgres"
    json_text: ClassVar[bool] = False
    wake_locally: ClassVar[bool] = False  # statements NOTIFY; the listener wakes the hub
    unique_violation: ClassVar[type[Exception]] = psycopg.errors.UniqueViolation

    def __init__(self, config: PostgresConfig, hub: WakeHub) -> None:
        if not _CHANNEL.fullmatch(config.channel):
            raise ValueError(f"channel must match {_CHANNEL.pattern}, got {config.channel!r}")
        if not 0 <= config.min_size <= config.max_size or config.max_size < 1:
            raise ValueError("need 0 <= min_size <= max_size and max_size >= 1")
        super().__init__(hub, poll_interval=config.poll_interval)
        self._config = config
        self._errors = Errors(config.url, config.pooled, self._use_pooler_mode)
        self._pool: AsyncConnectionPool[Conn] | None = None
        #: Per pool, the sum of its ``_FAILURE_STATS`` when it last handed one out.
        self._failed_seen: dict[str, int] = {}
        self._reserved: AsyncConnectionPool[Conn] | None = None
        self._blocking: FreeList[psycopg.Connection[Any]] = FreeList(
            self._connect_blocking,
            lambda conn: conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE,
            config.max_size,
            lambda: psycopg.OperationalError("no free connection for the sync enqueue"),
            fresh=self._fresh_blocking)
        self._listener = Listener(config, hub, self._errors)
        self._finished_channel = finished_channel(config.channel)
        self._finish_listener = Listener(config, hub.finished, self._errors,
                                         self._finished_channel)

    # -- connections and what BaseStorage asks for -----------------------------------------

    def _connect_blocking(self) -> psycopg.Connection[Any]:
        conn = BlockingConnection.connect(self._config.url, **{
            **connect_kwargs(self._config),
            "prepare_threshold": prepare_threshold(self._config, 1)})
        try:
            configure_blocking(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _fresh_blocking(self, conn: psycopg.Connection[Any]) -> bool:
        """A free sync connection is fit for use: the server has not hung up on it
        (restart, failover), and it no longer prepares once a pooler was found."""
        if self._config.pooled:
            conn.prepare_threshold = None
        return not server_hung_up(conn)

    def _use_pooler_mode(self) -> None:
        """A transaction pooler the URL does not name was found: from now on nothing
        outlives a transaction (no prepared statements, no LISTEN), said once."""
        if self._config.pooled:
            return
        self._config = dataclasses.replace(self._config, pooler="transaction")
        self._errors.pooled = True
        for listener in (self._listener, self._finish_listener):
            listener.use_pooler(self._config)
        where = self._errors.where()
        if where not in _POOLER_WARNED:
            _POOLER_WARNED.add(where)
            log.warning("%s", pooler_detected_message(where, self._config.poll_interval))

    @contextlib.asynccontextmanager
    async def _conn(self, reserved: bool = False) -> AsyncIterator[Conn]:
        pool = self._reserved if reserved else self._pool
        if pool is None:
            raise DatabaseUnavailableError("storage is not open")
        stats = pool.get_stats()
        failed = sum(stats.get(k, 0) for k in _FAILURE_STATS)
        # Since the pool last handed out a connection, one broke or an attempt to
        # connect failed, and none is idle: the server is likely gone, answer soon.
        down = failed > self._failed_seen.get(pool.name, 0) and not stats["pool_available"]
        with self._errors.translate():  # a pooler's errors switch modes (on_pooler)
            for first in (True, False):
                wait = (_DOWN_WAIT if down else None) if first else _RECONNECT_WAIT
                async with pool.connection(wait) as conn:
                    self._failed_seen[pool.name] = failed
                    if first and not await self._usable(pool, conn):
                        continue  # a stale one: the pool now holds fresh ones
                    if self._config.pooled:
                        conn.prepare_threshold = None
                    yield conn
                    return

    @staticmethod
    async def _usable(pool: AsyncConnectionPool[Conn], conn: Conn) -> bool:
        """False for an idle connection the server hung up on (a restart or failover):
        it is closed, and so is every other such idle one (``pool.check``), so that the
        statement runs on a fresh connection instead of failing. The common case is one
        poll of the socket, no round trip."""
        if not server_hung_up(conn):
            return True
        try:
            await pool.check_connection(conn)  # something else to read: try it
            return True
        except psycopg.Error:
            await conn.close()  # the pool replaces it when it comes back
            await pool.check()
            return False

    @contextlib.asynccontextmanager
    async def _transaction(self, reserved: bool = False) -> AsyncIterator[Conn]:
        async with self._conn(reserved) as conn, conn.transaction():
            yield conn

    async def _fetch(self, name: str, values: Mapping[str, Any],
                     conn: Conn | None = None) -> list[DictRow]:
        """Run one named query (on ``conn``, or a pooled connection); queries that make
        jobs ready NOTIFY %(channel)s."""
        values = {**values, "channel": self._config.channel,
                  "finished_channel": self._finished_channel}
        prepare = False if name in _UNPREPARED else None
        if conn is not None:
            cur = await conn.execute(self._q[name], values, prepare=prepare)
            return await cur.fetchall() if cur.description is not None else []
        try:
            return await self._fetch_pooled(name, values, prepare)
        except DatabaseUnavailableError as exc:
            if not is_pooler_error(exc):
                raise
        # A transaction pooler refused a prepared statement before running it (``_conn``
        # has switched to the pooler mode): run it again, unprepared.
        return await self._fetch_pooled(name, values, False)

    async def _fetch_pooled(self, name: str, values: Mapping[str, Any],
                            prepare: bool | None) -> list[DictRow]:
        async with self._conn(reserved=name in _RESERVED) as pooled:
            cur = await pooled.execute(self._q[name], values, prepare=prepare)
            return await cur.fetchall() if cur.description is not None else []

    async def _read(self, name: str, values: Mapping[str, Any]) -> list[DictRow]:
        return await self._fetch(name, values)

    async def _write(self, name: str, values: Mapping[str, Any]) -> list[DictRow]:
        return await self._fetch(name, values)

    def _time(self, value: datetime) -> Any:
        return value

    def _filter_values(self, f: JobFilter) -> dict[str, Any]:
        return {
            "states": [s.value for s in f.states] or None, "queue": f.queue, "task": f.task,
            "tag": f.tag, "text": f.text or None, "error_key": f.error_key,
            "ids": list(f.ids) or None, "min_id": f.min_id, "max_id": f.max_id,
            "args": f.args_contains,
        }

    async def _change_matching(self, params: JobBulkParams, allowed: Sequence[JobState],
                               update: str, extra: Mapping[str, Any]) -> list[JobChanged]:
        """Lock the matching jobs (skipping locked ones) and change them."""
        values = {**self._filter_values(params.filter), "limit": params.limit,
                  "allowed": [s.value for s in allowed]}
        async with self._transaction() as conn:
            picked = await self._fetch("job_pick_matching", values, conn)
            if not picked:
                return []
            changed = await self._fetch(update, {"ids": [r["id"] for r in picked], **extra}, conn)
        return changed_jobs(picked, {r["id"] for r in changed})

    async def _move(self, pick: str, then: Sequence[str],
                    values: Mapping[str, Any]) -> tuple[list[DictRow], list[DictRow]]:
        async with self._transaction() as conn:
            picked = await self._fetch(pick, values, conn)
            rows: list[DictRow] = []
            if picked:
                ids = {"ids": [r["id"] for r in picked]}
                for name in then:
                    rows = await self._fetch(name, {**values, **ids}, conn)
        return picked, rows

    def wake_subscribe(self, callback: WakeCallback) -> Callable[[], None]:
        return self._listener.subscribe(callback)

    def finish_subscribe(self, callback: WakeCallback) -> Callable[[], None]:
        return self._finish_listener.subscribe(callback)

    def _woke(self, queues: Iterable[str]) -> None:
        """Without LISTEN (polling behind a pooler) wake this process's producers here."""
        if self._listener.polling:
            for queue in set(queues):
                self._hub.notify(queue)

    # -- lifecycle and schema ----------------------------------------------------------------

    async def open(self, *, check_schema: bool = True) -> None:
        """Connect; ``check_schema=False`` is for ``conveyor migrate`` itself."""
        if self._pool is not None:
            return
        # One direct connection first: it fails fast and with libpq's own reason, where
        # the pool would only report a timeout.
        try:
            probe = await psycopg.AsyncConnection.connect(
                self._config.url, **connect_kwargs(self._config))
        except (psycopg.OperationalError, psycopg.ProgrammingError) as exc:  # down, bad URL
            raise self._errors.unavailable(exc) from (exc if self._errors.redacted else None)
        try:
            if not self._config.pooled and await shares_server_sessions(
                    probe, self._config.url, self._config):
                self._use_pooler_mode()
        except psycopg.Error:
            pass  # the probe is a courtesy: the pooler's own errors switch modes too
        finally:
            await probe.close()
        pool = self._new_pool("conveyor", self._config.min_size, self._config.max_size)
        try:
            with self._errors.translate():
                await pool.open(wait=True, timeout=self._config.connect_timeout)
        except BaseException:
            await pool.close()  # stop its workers from reconnecting in the background
            raise
        self._pool = pool
        self._reserved = self._new_pool("conveyor-reserved", 0,
                                        max(self._config.reserved_size, 1))
        await self._reserved.open()
        if check_schema:
            try:
                await self._check_schema()
            except BaseException:
                await self.close()
                raise

    def _new_pool(self, name: str, min_size: int, max_size: int) -> AsyncConnectionPool[Conn]:
        kwargs = {**connect_kwargs(self._config), "row_factory": dict_row,
                  "prepare_threshold": prepare_threshold(self._config, _PREPARE_THRESHOLD)}
        return AsyncConnectionPool(
            self._config.url, connection_class=Conn, kwargs=kwargs, min_size=min_size,
            max_size=max_size, open=False, name=name, configure=configure)

    async def close(self) -> None:
        for listener in (self._listener, self._finish_listener):
            task = listener.stop()
            if task is not None and task.get_loop() is asyncio.get_running_loop():
                await asyncio.wait([task])  # let it close its connection before we return
        pool, self._pool = self._pool, None
        reserved, self._reserved = self._reserved, None
        for each in (pool, reserved):
            if each is not None:
                await each.close()
        await asyncio.to_thread(self._blocking.close)

    async def _check_schema(self) -> None:
        """Refuse to run on a missing or old schema instead of failing mid-job later."""
        async with self._conn() as conn:
            done = await schema.applied(conn)
        if pending := pending_migrations(self.dialect, done):
            raise SchemaError(
                f"the Conveyor schema in {self._errors.where()} is missing or outdated "
                f"({len(pending)} migration(s) pending); run `conveyor migrate` first"
            )

    async def schema_pending(self) -> list[Migration]:
        return await self.migrate(dry_run=True)

    async def migrate(self, *, dry_run: bool = False) -> list[Migration]:
        async with self._transaction() as conn:
            return await schema.migrate(conn, dry_run)

    async def db_health(self, *, timeout: float = 3.0) -> DbHealth:
        return await schema.health(self._config, self._errors, self._q["schema_version"], timeout)
