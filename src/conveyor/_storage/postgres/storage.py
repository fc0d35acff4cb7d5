"""The PostgreSQL backend: a connection pool, SKIP LOCKED claims, LISTEN/NOTIFY wake-ups.

What is shared with every backend comes from BaseStorage; this class adds the pools,
the batch paths (column arrays, tuple rows) and the calls that need one transaction of
several statements (they lock what they count, so any number of processes together
never exceed a limit). Every other call is one statement on an autocommit pooled
connection. Postgres never migrates on open: changing a shared schema is an operator's
decision, made with ``conveyor migrate`` (``schema.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar

import psycopg
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from ..._errors import DatabaseUnavailableError, SchemaError
from ..._job import Job, JobState
from ..base import BaseStorage, changed_jobs
from ..control_types import (
    ConcurrencyAcquireParams,
    LeaderElectParams,
    LeaderRow,
    RateGrant,
    RateLimitAcquireParams,
    gcra,
)
from ..freelist import FreeList
from ..job_types import (
    JobAck,
    JobAckManyParams,
    JobBulkParams,
    JobChanged,
    JobFetchAvailableParams,
    JobFilter,
    JobHeartbeatManyParams,
    JobHeartbeatResult,
    JobInsert,
    JobInsertManyParams,
)
from ..metric_types import MetricsAddParams, MetricsPruneParams
from ..rows import job_from_row, leader_row, sort_for_claim
from ..schema import DbHealth, DbHealthParams, MigrateParams, Migration, pending_migrations
from ..unique import run_async, run_sync, unique_insert
from ..wake import WakeCallback, WakeHub
from . import batch, schema
from .connection import Errors, PostgresConfig, configure, connect_kwargs
from .listener import Listener

Conn = psycopg.AsyncConnection[DictRow]
_CHANNEL = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
#: Hot statements (claim, ack, heartbeat) are prepared after this many uses.
_PREPARE_THRESHOLD = 5
#: (query parameter, attribute) pairs sent as one array per column.
_INSERT_COLUMNS = (
    ("task", "task"), ("queue", "queue"), ("args", "args_json"), ("kwargs", "kwargs_json"),
    ("priority", "priority"), ("max_attempts", "max_attempts"), ("tags", "tags_json"),
    ("meta", "meta_json"), ("unique_key", "unique_key"), ("unique_states", "unique_states"),
    ("concurrency_key", "concurrency_key"),
)
_ACK_COLUMNS = (
    ("id", "id"), ("lease_token", "lease_token"),
    ("result", "result_json"), ("error", "error_json"), ("attempt_delta", "attempt_delta"),
)
#: Statements that use the reserved connections: a worker that cannot send them loses
#: its leases (rescue, duplicate run) or holds finished jobs in limbo.
_RESERVED = frozenset({"job_ack", "job_ack_completed", "job_heartbeat", "node_upsert"})
#: Never prepared: a generic plan for "x IS NULL OR col = x" cannot pick an index.
_UNPREPARED = frozenset({
    "job_list", "job_count_by_state", "node_list", "job_search", "job_search_newer",
    "job_count_capped", "job_count_by_queue", "job_count_final_capped", "job_failure_groups",
    "job_count_running_by_node", "metrics_series", "metrics_totals", "metrics_depth_series",
    "metrics_depth_sample", "job_pick_matching",
})


def _floats(values: Iterable[float | None]) -> list[float | None]:
    """psycopg refuses to dump a list mixing int and float (``delay=60`` next to 0.5)."""
    return [None if v is None else float(v) for v in values]


class PostgresStorage(BaseStorage):
    """Storage on PostgreSQL. Example: ``PostgresStorage(PostgresConfig(url), WakeHub())``"""

    dialect: ClassVar[str] = "postgres"
    json_text: ClassVar[bool] = False
    wake_locally: ClassVar[bool] = False  # statements NOTIFY; the listener wakes the hub
    unique_violation: ClassVar[type[Exception]] = psycopg.errors.UniqueViolation

    def __init__(self, config: PostgresConfig, hub: WakeHub) -> None:
        if not _CHANNEL.match(config.channel):
            raise ValueError(f"channel must match {_CHANNEL.pattern}, got {config.channel!r}")
        if not 0 <= config.min_size <= config.max_size or config.max_size < 1:
            raise ValueError("need 0 <= min_size <= max_size and max_size >= 1")
        super().__init__(hub, poll_interval=config.poll_interval)
        self._config = config
        self._errors = Errors(config.url)
        self._pool: AsyncConnectionPool[Conn] | None = None
        self._reserved: AsyncConnectionPool[Conn] | None = None
        blocking_kwargs = {**connect_kwargs(config), "prepare_threshold": 1}
        self._blocking: FreeList[psycopg.Connection[Any]] = FreeList(
            lambda: psycopg.connect(config.url, **blocking_kwargs),
            lambda conn: conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE,
            config.max_size,
            lambda: psycopg.OperationalError("no free connection for the sync enqueue"))
        self._listener = Listener(config, hub, self._errors)

    # -- connections and what BaseStorage asks for -----------------------------------------

    @contextlib.asynccontextmanager
    async def _conn(self, reserved: bool = False) -> AsyncIterator[Conn]:
        pool = self._reserved if reserved else self._pool
        if pool is None:
            raise DatabaseUnavailableError("storage is not open")
        with self._errors.translate():
            async with pool.connection() as conn:
                yield conn

    @contextlib.asynccontextmanager
    async def _transaction(self, reserved: bool = False) -> AsyncIterator[Conn]:
        async with self._conn(reserved) as conn, conn.transaction():
            yield conn

    async def _fetch(self, name: str, values: Mapping[str, Any],
                     conn: Conn | None = None) -> list[DictRow]:
        """Run one named query (on ``conn``, or a pooled connection); queries that make
        jobs ready NOTIFY %(channel)s."""
        values = {**values, "channel": self._config.channel}
        prepare = False if name in _UNPREPARED else None
        if conn is not None:
            cur = await conn.execute(self._q[name], values, prepare=prepare)
            return await cur.fetchall() if cur.description is not None else []
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
            "ids": list(f.ids) or None, "min_id": f.min_id,
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

    def wake_subscribe(self, callback: WakeCallback) -> Callable[[], None]:
        return self._listener.subscribe(callback)

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
                  "prepare_threshold": _PREPARE_THRESHOLD}
        return AsyncConnectionPool(
            self._config.url, connection_class=Conn, kwargs=kwargs, min_size=min_size,
            max_size=max_size, open=False, name=name, configure=configure)

    async def close(self) -> None:
        task = self._listener.stop()
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
        return await self.migrate(MigrateParams(dry_run=True))

    async def migrate(self, params: MigrateParams) -> list[Migration]:
        async with self._transaction() as conn:
            return await schema.migrate(conn, params)

    async def db_health(self, params: DbHealthParams) -> DbHealth:
        return await schema.health(self._config, self._errors, self._q["schema_version"], params)

    # -- jobs: the batch paths ---------------------------------------------------------------

    def _insert_values(self, jobs: Sequence[JobInsert]) -> dict[str, Any]:
        """Column-wise arrays: the query unnests them, so a batch is one statement."""
        values: dict[str, Any] = {col: [getattr(j, a) for j in jobs] for col, a in _INSERT_COLUMNS}
        values["delay"] = _floats(j.delay for j in jobs)
        # A naive run_at means local time, as datetime.timestamp() reads it on SQLite.
        values["run_at"] = [j.run_at.astimezone(UTC) if j.run_at else None for j in jobs]
        values["channel"] = self._config.channel
        return values

    @staticmethod
    def _keys(keys: list[str]) -> dict[str, Any]:
        return {"unique_keys": keys}

    async def job_insert_many(
        self, params: JobInsertManyParams, connection: Any = None
    ) -> list[Job]:
        if connection is not None and not isinstance(connection, psycopg.AsyncConnection):
            return self.job_insert_many_sync(params, connection)
        jobs = params.jobs
        if connection is None and jobs and all(j.unique_key is None for j in jobs):
            return await batch.insert_plain(self._fetch, self._insert_values(jobs), jobs)

        async def run(name: str, values: Mapping[str, Any]) -> list[Job]:
            if connection is None:
                rows = await self._fetch(name, values)
            else:  # the caller's connection and transaction; its rows may not be dicts
                with self._errors.translate():
                    async with connection.cursor(row_factory=dict_row) as cur:
                        await cur.execute(self._q[name], values)
                        rows = await cur.fetchall()
            return [job_from_row(r, json_text=False) for r in rows]

        return await run_async(unique_insert(jobs, self._insert_values, self._keys), run)

    def job_insert_many_blocking(self, params: JobInsertManyParams) -> list[Job]:
        if self._pool is None:
            raise DatabaseUnavailableError("storage is not open")
        jobs = params.jobs
        with self._errors.translate(), \
                self._blocking.connection(self._config.connect_timeout) as conn:
            if len(jobs) == 1 and jobs[0].unique_key is None:
                return batch.insert_plain_sync(
                    conn, self._q["job_insert_one"],
                    batch.one_values(jobs[0], self._config.channel), jobs)
            if jobs and all(j.unique_key is None for j in jobs):
                return batch.insert_plain_sync(
                    conn, self._q["job_insert_plain"], self._insert_values(jobs), jobs)
            return self.job_insert_many_sync(params, conn)

    def job_insert_many_sync(self, params: JobInsertManyParams, connection: Any) -> list[Job]:
        if not isinstance(connection, psycopg.Connection):
            raise TypeError(
                "connection= on the PostgreSQL backend must be a psycopg (3) Connection or "
                f"AsyncConnection to the same database, not {type(connection).__name__}"
            )

        def run(name: str, values: Mapping[str, Any]) -> list[Job]:
            with self._errors.translate(), connection.cursor(row_factory=dict_row) as cur:
                cur.execute(self._q[name], values)
                return [job_from_row(r, json_text=False) for r in cur.fetchall()]

        return run_sync(unique_insert(params.jobs, self._insert_values, self._keys), run)

    async def job_fetch_available(self, params: JobFetchAvailableParams) -> list[Job]:
        async with self._conn() as conn:  # tuple rows: no dict per claimed job
            jobs = await batch.claim(conn, self._q["job_fetch_available"],
                                     dataclasses.asdict(params))
        return sort_for_claim(jobs)

    async def job_ack_many(self, params: JobAckManyParams) -> list[int]:
        # One UPDATE cannot apply two acks to one row; SQLite applies them in turn, where
        # only the first with the live token can win, so keep the first per (id, token).
        acks: dict[tuple[int, int], JobAck] = {}
        for ack in params.acks:
            acks.setdefault((ack.id, ack.lease_token), ack)
        if not acks:
            return []
        unique = list(acks.values())

        async def general(rest: Sequence[JobAck]) -> set[int]:
            values: dict[str, Any] = {col: [getattr(x, a) for x in rest] for col, a in _ACK_COLUMNS}
            values["state"] = [a.state.value for a in rest]
            values["delay"] = _floats(a.delay for a in rest)
            values.update(run_time=_floats(a.run_time for a in rest), node=params.node)
            return {r["id"] for r in await self._fetch("job_ack", values)}

        # plain completions go through the narrower job_ack_completed
        applied = await batch.ack_many(self._fetch, unique, params.node, general)
        return list(dict.fromkeys(a.id for a in unique if a.id in applied))

    async def job_heartbeat_many(self, params: JobHeartbeatManyParams) -> JobHeartbeatResult:
        leases = params.leases
        values = {"id": [x.id for x in leases], "lease_token": [x.lease_token for x in leases],
                  "lease_ttl": params.lease_ttl}
        rows = await self._fetch("job_heartbeat", values) if leases else []
        return JobHeartbeatResult(
            frozenset(r["id"] for r in rows),
            frozenset(r["id"] for r in rows if r["cancel_requested"]),
        )

    # -- several statements in one transaction ------------------------------------------------

    async def leader_elect(self, params: LeaderElectParams) -> LeaderRow | None:
        # Reserved connections: handlers hogging the pool must not cost the leadership.
        async with self._transaction(reserved=True) as conn:
            await self._fetch("leader_elect", dataclasses.asdict(params), conn)
            rows = await self._fetch("leader_get", {"name": params.name}, conn)
        return leader_row(rows[0]) if rows else None

    async def rate_limit_acquire(self, params: RateLimitAcquireParams) -> list[RateGrant]:
        """A row lock on each rate budget, taken in key order: two processes never wait
        on each other's keys in a cycle."""
        grants: dict[int, RateGrant] = {}
        async with self._transaction() as conn:
            now = (await self._fetch("clock_now", {}, conn))[0]["now"].timestamp()
            order = sorted(range(len(params.requests)), key=lambda i: params.requests[i].key)
            for i in order:
                request = params.requests[i]
                tat = (await self._fetch("rate_limit_lock", {"key": request.key}, conn))[0]["tat"]
                granted, new_tat, wait = gcra(tat, now, request)
                if granted:
                    await self._fetch("rate_limit_set", {"key": request.key, "tat": new_tat}, conn)
                grants[i] = RateGrant(granted, wait)
        return [grants[i] for i in range(len(params.requests))]

    async def job_concurrency_acquire(self, params: ConcurrencyAcquireParams) -> frozenset[int]:
        """An advisory lock per concurrency key, taken in key order."""
        granted: set[int] = set()
        async with self._transaction() as conn:
            for group in sorted(params.groups, key=lambda g: g.key):
                await self._fetch("concurrency_lock", {"key": group.key}, conn)
                held = (await self._fetch("concurrency_count", {"key": group.key}, conn))[0]["n"]
                for job_id, token in group.leases[: max(group.limit - held, 0)]:
                    rows = await self._fetch(
                        "concurrency_grant", {"id": job_id, "lease_token": token}, conn)
                    granted.update(r["id"] for r in rows)
        return frozenset(granted)

    async def metrics_add(self, params: MetricsAddParams) -> None:
        minute = [r for r in params.rows if r.bucket is not None]
        total = [r for r in params.rows if r.bucket is None]
        async with self._transaction() as conn:
            if minute:
                await conn.execute(self._q["metrics_add"], {
                    "bucket": [r.bucket for r in minute], "queue": [r.queue for r in minute],
                    "task": [r.task for r in minute], "metric": [r.metric for r in minute],
                    "value": [float(r.value) for r in minute],
                })
            if total:
                await conn.execute(self._q["metrics_total_add"], {
                    "queue": [r.queue for r in total], "task": [r.task for r in total],
                    "metric": [r.metric for r in total], "value": [float(r.value) for r in total],
                })

    async def metrics_prune(self, params: MetricsPruneParams) -> int:
        async with self._transaction() as conn:
            values = {"before": params.before}
            first = await conn.execute(self._q["metrics_prune"], values)
            second = await conn.execute(self._q["metrics_depth_prune"], values)
            return max(first.rowcount, 0) + max(second.rowcount, 0)
