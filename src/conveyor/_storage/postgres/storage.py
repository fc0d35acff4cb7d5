"""The PostgreSQL backend: a connection pool, SKIP LOCKED claims, LISTEN/NOTIFY wake-ups.

Every call is one statement on an autocommit pooled connection, so a batch costs one
round trip and needs no explicit transaction. Statements that make jobs ready send
their own NOTIFY, so wake-ups reach every process and never fire for a rolled-back
write. Postgres never migrates on open: changing a shared schema is an operator's
decision, made with ``conveyor migrate``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import DictRow, dict_row
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool

from .._errors import ConveyorError, DatabaseUnavailableError, SchemaError, unique_held
from .._job import Job
from . import _postgres_fast
from . import _protocol as p
from ._fast import loads as fast_loads
from ._freelist import FreeList
from ._postgres_dashboard import PostgresDashboardMixin
from ._postgres_flow import PostgresFlowMixin
from ._queries import load_migrations, load_queries
from ._rows import STAGED_STATES, fill_duplicates, job_from_row, match_inserted, sort_for_claim
from ._wake import WakeHub

log = logging.getLogger("conveyor.postgres")

_CHANNEL = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
#: Serialises concurrent ``conveyor migrate`` runs across every process ("conv").
_MIGRATE_LOCK = 0x636F6E76
#: Server-side SQLSTATEs that mean "the server went away", beyond class 08.
_GONE_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "53300"})
_BACKOFF_MIN, _BACKOFF_MAX = 0.1, 5.0
#: How long the listener waits for a notification before pinging its connection.
_LISTEN_PING = 30.0
#: Hot statements (claim, ack, heartbeat) are prepared after this many uses.
_PREPARE_THRESHOLD = 5
#: Insert rounds for unique jobs whose holder finishes between insert and lookup.
_UNIQUE_ROUNDS = 3
#: (query parameter, attribute) pairs sent as one array per column.
_INSERT_COLUMNS = (
    ("task", "task"), ("queue", "queue"), ("args", "args_json"), ("kwargs", "kwargs_json"),
    ("priority", "priority"), ("max_attempts", "max_attempts"), ("tags", "tags_json"),
    ("meta", "meta_json"), ("unique_key", "unique_key"), ("unique_states", "unique_states"),
    ("concurrency_key", "concurrency_key"),
)
#: Statements that use the reserved connections: a worker that cannot send them loses
#: its leases (rescue, duplicate run) or holds finished jobs in limbo.
_RESERVED = frozenset({"job_ack", "job_ack_completed", "job_heartbeat"})
_ACK_COLUMNS = (
    ("id", "id"), ("lease_token", "lease_token"),
    ("result", "result_json"), ("error", "error_json"), ("attempt_delta", "attempt_delta"),
)


def _lenient_loads(data: str | bytes) -> Any:
    """jsonb to Python; a value Python cannot read back (nested past the recursion
    limit, written around the API) becomes None instead of failing every read of its
    row, claims included. The worker discards a job whose args are unreadable."""
    try:  # jsonb is one of the costliest columns to read: use the fast decoder
        text = data.decode() if isinstance(data, bytes) else data
    except ValueError:
        return None
    return fast_loads(text)


async def _configure(conn: psycopg.AsyncConnection[Any]) -> None:
    set_json_loads(_lenient_loads, conn)


@dataclasses.dataclass(frozen=True, slots=True)
class PostgresConfig:
    url: str
    min_size: int = 1
    max_size: int = 10
    #: LISTEN/NOTIFY channel; a lowercase identifier.
    channel: str = "conveyor_jobs"
    #: How often idle producers poll when no wake-up arrives.
    poll_interval: float = 1.0
    connect_timeout: float = 5.0
    #: Connections kept apart for heartbeats and acks (opened on first use), so that
    #: handlers busy with the main pool can never starve a lease into expiring.
    reserved_size: int = 2


def _floats(values: Iterable[float | None]) -> list[float | None]:
    """psycopg refuses to dump a list mixing int and float (``delay=60`` next to 0.5)."""
    return [None if v is None else float(v) for v in values]


def _redact(url: str) -> tuple[str, str | None] | None:
    """The URL without its password (safe to print) and the password, or None when the
    URL does not parse: libpq then echoes it, password and all, so show none of it."""
    try:
        info = conninfo_to_dict(url)
    except psycopg.Error:
        return None
    where = f"{info.get('user', '')}@{info.get('host', '')}:{info.get('port', 5432)}"
    password = info.get("password")
    return f"postgresql://{where.lstrip('@')}/{info.get('dbname', '')}", (
        str(password) if password else None
    )


class PostgresStorage(PostgresFlowMixin, PostgresDashboardMixin):
    """Storage on PostgreSQL. Example: ``PostgresStorage(PostgresConfig(url), WakeHub())``"""

    def __init__(self, config: PostgresConfig, hub: WakeHub) -> None:
        if not _CHANNEL.match(config.channel):
            raise ValueError(f"channel must match {_CHANNEL.pattern}, got {config.channel!r}")
        if not 0 <= config.min_size <= config.max_size or config.max_size < 1:
            raise ValueError("need 0 <= min_size <= max_size and max_size >= 1")
        self._config = config
        self._hub = hub
        self._redacted = _redact(config.url)
        self._q = load_queries("postgres")
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[DictRow]] | None = None
        self._reserved: AsyncConnectionPool[psycopg.AsyncConnection[DictRow]] | None = None
        blocking_kwargs = {**self._connect_kwargs(), "prepare_threshold": 1}
        self._blocking: FreeList[psycopg.Connection[Any]] = FreeList(
            lambda: psycopg.connect(config.url, **blocking_kwargs),
            lambda conn: conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE,
            config.max_size,
            lambda: psycopg.OperationalError("no free connection for the sync enqueue"))
        self._lock = threading.Lock()
        self._listeners = 0
        self._listener: asyncio.Task[None] | None = None
        self._capabilities = p.Capabilities(
            dialect="postgres", listen_notify=True, skip_locked=True,
            poll_interval=config.poll_interval, transactional_enqueue=True,
        )

    @property
    def capabilities(self) -> p.Capabilities:
        return self._capabilities

    # -- connections --------------------------------------------------------------------

    def _unavailable(self, exc: BaseException) -> DatabaseUnavailableError:
        """One line, never the password: this message goes straight to operators."""
        if self._redacted is None:
            return DatabaseUnavailableError(
                "the PostgreSQL URL is malformed; expected postgresql://user:password@host:port/db"
            )
        where, password = self._redacted
        lines = str(exc).strip().splitlines()
        reason = lines[0].strip() if lines else type(exc).__name__
        if password:
            reason = reason.replace(password, "***")
        return DatabaseUnavailableError(f"cannot use PostgreSQL at {where}: {reason}")

    @contextlib.contextmanager
    def _translate(self) -> Iterator[None]:
        """Lost or refused connections become DatabaseUnavailableError; errors of the
        statement itself (deadlock, serialization, bad data) stay what they are."""
        try:
            yield
        except psycopg.OperationalError as exc:
            state = exc.sqlstate
            if state is None or state.startswith("08") or state in _GONE_SQLSTATES:
                raise self._unavailable(exc) from exc
            raise

    def _connect_kwargs(self) -> dict[str, Any]:
        # libpq takes whole seconds and treats anything under 2 as 2.
        return {"autocommit": True, "connect_timeout": max(2, round(self._config.connect_timeout))}

    @contextlib.asynccontextmanager
    async def _conn(self, reserved: bool = False) -> AsyncIterator[psycopg.AsyncConnection[DictRow]]:
        pool = self._reserved if reserved else self._pool
        if pool is None:
            raise DatabaseUnavailableError("storage is not open")
        with self._translate():
            async with pool.connection() as conn:
                yield conn

    async def _fetch(
        self, name: str, values: Mapping[str, Any], prepare: bool | None = None
    ) -> list[DictRow]:
        """Run one named query; queries that make jobs ready NOTIFY %(channel)s."""
        values = {**values, "channel": self._config.channel}
        async with self._conn(reserved=name in _RESERVED) as conn:
            cur = await conn.execute(self._q[name], values, prepare=prepare)
            return await cur.fetchall() if cur.description is not None else []

    # -- lifecycle ------------------------------------------------------------------------

    async def open(self, *, check_schema: bool = True) -> None:
        """Connect; ``check_schema=False`` is for ``conveyor migrate`` itself."""
        if self._pool is not None:
            return
        # One direct connection first: it fails fast and with libpq's own reason, where
        # the pool would only report a timeout.
        try:
            probe = await psycopg.AsyncConnection.connect(
                self._config.url, **self._connect_kwargs()
            )
        except (psycopg.OperationalError, psycopg.ProgrammingError) as exc:  # down, bad URL
            raise self._unavailable(exc) from (exc if self._redacted else None)
        await probe.close()
        kwargs = {**self._connect_kwargs(), "row_factory": dict_row,
                  "prepare_threshold": _PREPARE_THRESHOLD}
        pool = AsyncConnectionPool(
            self._config.url, connection_class=psycopg.AsyncConnection[DictRow], kwargs=kwargs,
            min_size=self._config.min_size, max_size=self._config.max_size, open=False,
            name="conveyor", configure=_configure,
        )
        try:
            with self._translate():
                await pool.open(wait=True, timeout=self._config.connect_timeout)
        except BaseException:
            await pool.close()  # stop its workers from reconnecting in the background
            raise
        self._pool = pool
        self._reserved = AsyncConnectionPool(
            self._config.url, connection_class=psycopg.AsyncConnection[DictRow], kwargs=kwargs,
            min_size=0, max_size=max(self._config.reserved_size, 1), open=False,
            name="conveyor-reserved", configure=_configure,
        )
        await self._reserved.open()
        if check_schema:
            try:
                await self._check_schema()
            except BaseException:
                await self.close()
                raise

    async def close(self) -> None:
        task = self._stop_listener()
        if task is not None and task.get_loop() is asyncio.get_running_loop():
            await asyncio.wait([task])  # let it close its connection before we return
        pool, self._pool = self._pool, None
        reserved, self._reserved = self._reserved, None
        for each in (pool, reserved):
            if each is not None:
                await each.close()
        await asyncio.to_thread(self._blocking.close)

    # -- schema ---------------------------------------------------------------------------

    @staticmethod
    def _pending(applied: set[int]) -> list[p.Migration]:
        known = load_migrations("postgres")
        if applied and max(applied) > len(known):
            raise SchemaError(
                f"the database schema is at version {max(applied)}, newer than this Conveyor "
                f"knows ({len(known)}); upgrade Conveyor"
            )
        return [m for m in known if m.version not in applied]

    async def _check_schema(self) -> None:
        """Refuse to run on a missing or old schema instead of failing mid-job later."""
        async with self._conn() as conn:
            cur = await conn.execute("SELECT to_regclass('conveyor_migrations') IS NULL AS missing")
            row = await cur.fetchone()
            applied: set[int] = set()
            if row is not None and not row["missing"]:
                cur = await conn.execute("SELECT version FROM conveyor_migrations")
                applied = {r["version"] for r in await cur.fetchall()}
        if pending := self._pending(applied):
            where = self._redacted[0] if self._redacted else "the database"
            raise SchemaError(
                f"the Conveyor schema in {where} is missing or outdated ({len(pending)} "
                "migration(s) pending); run `conveyor migrate` first"
            )

    async def schema_pending(self) -> list[p.Migration]:
        return await self.migrate(p.MigrateParams(dry_run=True))

    async def migrate(self, params: p.MigrateParams) -> list[p.Migration]:
        async with self._conn() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", [_MIGRATE_LOCK])
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS conveyor_migrations (version integer PRIMARY KEY, "
                "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            cur = await conn.execute("SELECT version FROM conveyor_migrations")
            pending = self._pending({r["version"] for r in await cur.fetchall()})
            if params.dry_run:
                return pending
            for migration in pending:
                # No parameters, so psycopg sends the whole multi-statement file at once.
                await conn.execute(migration.sql, prepare=False)
                await conn.execute(
                    "INSERT INTO conveyor_migrations (version, name) VALUES (%s, %s)",
                    [migration.version, migration.name],
                )
            return pending

    # -- jobs -------------------------------------------------------------------------------

    def _insert_values(self, jobs: Sequence[p.JobInsert]) -> dict[str, Any]:
        """Column-wise arrays: the query unnests them, so a batch is one statement."""
        values: dict[str, Any] = {col: [getattr(j, a) for j in jobs] for col, a in _INSERT_COLUMNS}
        values["delay"] = _floats(j.delay for j in jobs)
        # A naive run_at means local time, as datetime.timestamp() reads it on SQLite.
        values["run_at"] = [j.run_at.astimezone(UTC) if j.run_at else None for j in jobs]
        values["channel"] = self._config.channel
        return values

    async def job_insert_many(
        self, params: p.JobInsertManyParams, connection: Any = None
    ) -> list[Job]:
        if connection is not None and not isinstance(connection, psycopg.AsyncConnection):
            return self.job_insert_many_sync(params, connection)

        async def run(name: str, values: Mapping[str, Any]) -> list[Job]:
            if connection is None:
                rows = await self._fetch(name, values)
            else:  # the caller's connection and transaction; its rows may not be dicts
                with self._translate():
                    async with connection.cursor(row_factory=dict_row) as cur:
                        await cur.execute(self._q[name], values)
                        rows = await cur.fetchall()
            return [job_from_row(r, json_text=False) for r in rows]

        jobs = list(params.jobs)
        if connection is None and jobs and all(j.unique_key is None for j in jobs):
            return await _postgres_fast.insert_plain(self._fetch, self._insert_values(jobs), jobs)
        out: list[Job | None] = [None] * len(jobs)
        for _ in range(_UNIQUE_ROUNDS):  # a holder may finish between insert and lookup
            if not jobs:
                break
            got, missing = match_inserted(jobs, await run("job_insert", self._insert_values(jobs)))
            if missing:
                fill_duplicates(got, jobs, await run("job_get_unique", {"unique_keys": missing}))
            jobs = self._merge(out, got, jobs)
        return self._complete(out)

    def job_insert_many_blocking(self, params: p.JobInsertManyParams) -> list[Job]:
        if self._pool is None:
            raise DatabaseUnavailableError("storage is not open")
        jobs = list(params.jobs)
        with self._translate(), self._blocking.connection(self._config.connect_timeout) as conn:
            if len(jobs) == 1 and jobs[0].unique_key is None:
                return _postgres_fast.insert_plain_sync(
                    conn, self._q["job_insert_one"],
                    _postgres_fast.one_values(jobs[0], self._config.channel), jobs)
            if jobs and all(j.unique_key is None for j in jobs):
                return _postgres_fast.insert_plain_sync(
                    conn, self._q["job_insert_plain"], self._insert_values(jobs), jobs)
            return self.job_insert_many_sync(params, conn)

    def job_insert_many_sync(self, params: p.JobInsertManyParams, connection: Any) -> list[Job]:
        if not isinstance(connection, psycopg.Connection):
            raise TypeError(
                "connection= on the PostgreSQL backend must be a psycopg (3) Connection or "
                f"AsyncConnection to the same database, not {type(connection).__name__}"
            )

        def run(name: str, values: Mapping[str, Any]) -> list[Job]:
            with self._translate(), connection.cursor(row_factory=dict_row) as cur:
                cur.execute(self._q[name], values)
                return [job_from_row(r, json_text=False) for r in cur.fetchall()]

        jobs = list(params.jobs)
        out: list[Job | None] = [None] * len(jobs)
        for _ in range(_UNIQUE_ROUNDS):
            if not jobs:
                break
            got, missing = match_inserted(jobs, run("job_insert", self._insert_values(jobs)))
            if missing:
                fill_duplicates(got, jobs, run("job_get_unique", {"unique_keys": missing}))
            jobs = self._merge(out, got, jobs)
        return self._complete(out)

    @staticmethod
    def _merge(
        out: list[Job | None], got: list[Job | None], jobs: list[p.JobInsert]
    ) -> list[p.JobInsert]:
        """Fill the still-empty slots of ``out`` in order; return the jobs to try again."""
        slots = [i for i, job in enumerate(out) if job is None]
        again = []
        for slot, job, spec in zip(slots, got, jobs, strict=True):
            out[slot] = job
            if job is None:
                again.append(spec)
        return again

    @staticmethod
    def _complete(out: list[Job | None]) -> list[Job]:
        done = [job for job in out if job is not None]
        if len(done) != len(out):
            raise ConveyorError("unique enqueue kept racing with the key's holder; try again")
        return done

    async def job_fetch_available(self, params: p.JobFetchAvailableParams) -> list[Job]:
        async with self._conn() as conn:  # tuple rows: no dict per claimed job
            jobs = await _postgres_fast.claim(conn, self._q["job_fetch_available"],
                                              dataclasses.asdict(params))
        return sort_for_claim(jobs)

    async def job_ack_many(self, params: p.JobAckManyParams) -> list[int]:
        # One UPDATE cannot apply two acks to one row; SQLite applies them in turn, where
        # only the first with the live token can win, so keep the first per (id, token).
        acks: dict[tuple[int, int], p.JobAck] = {}
        for ack in params.acks:
            acks.setdefault((ack.id, ack.lease_token), ack)
        if not acks:
            return []
        batch = list(acks.values())

        async def general(rest: Sequence[p.JobAck]) -> set[int]:
            values: dict[str, Any] = {col: [getattr(x, a) for x in rest] for col, a in _ACK_COLUMNS}
            values["state"] = [a.state.value for a in rest]
            values["delay"] = _floats(a.delay for a in rest)
            return {r["id"] for r in await self._fetch("job_ack", values)}

        # plain completions go through the narrower job_ack_completed
        applied = await _postgres_fast.ack_many(self._fetch, batch, general)
        return list(dict.fromkeys(a.id for a in batch if a.id in applied))

    async def job_heartbeat_many(
        self, params: p.JobHeartbeatManyParams
    ) -> p.JobHeartbeatResult:
        leases = params.leases
        values = {"id": [x.id for x in leases], "lease_token": [x.lease_token for x in leases],
                  "lease_ttl": params.lease_ttl}
        rows = await self._fetch("job_heartbeat", values) if leases else []
        return p.JobHeartbeatResult(
            frozenset(r["id"] for r in rows),
            frozenset(r["id"] for r in rows if r["cancel_requested"]),
        )

    async def job_rescue_expired(self, params: p.JobRescueExpiredParams) -> list[int]:
        values = {"limit": params.limit, "error": params.error_json, "node_ttl": params.node_ttl}
        return [r["id"] for r in await self._fetch("job_rescue_expired", values)]

    async def job_stage_due(self, params: p.JobStageDueParams) -> list[p.StagedJob]:
        staged = []
        for previous in STAGED_STATES:
            values = {"limit": params.limit, "from_state": previous.value}
            for r in await self._fetch("job_stage_due", values):
                staged.append(p.StagedJob(r["id"], r["task"], r["queue"], r["attempt"], previous))
        return staged

    async def _one(self, name: str, values: Mapping[str, Any]) -> Job | None:
        rows = await self._fetch(name, values)
        return job_from_row(rows[0], json_text=False) if rows else None

    async def job_get(self, params: p.JobGetParams) -> Job | None:
        return await self._one("job_get", {"id": params.id})

    async def job_list(self, params: p.JobListParams) -> list[Job]:
        values = dataclasses.asdict(params)
        values["state"] = params.state.value if params.state else None
        # Never prepared: a generic plan for "x IS NULL OR col = x" cannot pick an index.
        rows = await self._fetch("job_list", values, prepare=False)
        return [job_from_row(r, json_text=False) for r in rows]

    async def job_retry(self, params: p.JobRetryParams) -> Job | None:
        try:
            return await self._one("job_retry", {"id": params.id})
        except psycopg.errors.UniqueViolation:  # another live job holds the unique key
            raise unique_held(params.id) from None

    async def job_cancel(self, params: p.JobCancelParams) -> Job | None:
        return await self._one("job_cancel", {"id": params.id})

    async def job_count_by_state(self, params: p.JobCountByStateParams) -> dict[str, int]:
        rows = await self._fetch("job_count_by_state", {"queue": params.queue}, prepare=False)
        return {r["state"]: int(r["n"]) for r in rows}

    # -- nodes ----------------------------------------------------------------------------

    async def node_upsert(self, params: p.NodeUpsertParams) -> None:
        values = dataclasses.asdict(params)
        values["queues"] = values.pop("queues_json")
        values["tasks"] = values.pop("tasks_json")
        async with self._conn(reserved=True) as conn:  # part of the heartbeat
            await conn.execute(self._q["node_upsert"], values)

    async def node_delete(self, params: p.NodeDeleteParams) -> None:
        async with self._conn() as conn:
            await conn.execute(self._q["node_delete"], {"id": params.id})

    # -- wake-ups -------------------------------------------------------------------------

    def wake_subscribe(self, callback: p.WakeCallback) -> Callable[[], None]:
        """Subscribe; the first subscriber starts the LISTEN task on its own loop."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError("wake_subscribe needs a running event loop on Postgres") from None
        unsubscribe = self._hub.subscribe(callback)
        with self._lock:
            self._listeners += 1
            if self._listener is None or self._listener.done():
                self._listener = loop.create_task(self._listen(), name="conveyor-pg-listen")
        subscribed = True

        def cancel() -> None:
            nonlocal subscribed
            unsubscribe()
            with self._lock:
                if not subscribed:
                    return
                subscribed = False
                self._listeners -= 1
            self._stop_listener(only_if_unused=True)

        return cancel

    def _stop_listener(self, only_if_unused: bool = False) -> asyncio.Task[None] | None:
        """Cancel the listener from any thread; it closes its own connection."""
        with self._lock:
            if only_if_unused and self._listeners:
                return None  # someone subscribed again meanwhile
            task, self._listener = self._listener, None
        if task is None or task.done() or task.get_loop().is_closed():
            return None
        task.get_loop().call_soon_threadsafe(task.cancel)
        return task

    async def _listen(self) -> None:
        """Keep one LISTEN connection alive. After every (re)connect wake everyone:
        notifications sent while no connection was listening are lost."""
        delay = _BACKOFF_MIN
        listen = sql.SQL("LISTEN {}").format(sql.Identifier(self._config.channel))
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self._config.url, **self._connect_kwargs()
                )
                async with conn:
                    await conn.execute(listen)
                    delay = _BACKOFF_MIN
                    self._wake("*")
                    while True:
                        async for note in conn.notifies(timeout=_LISTEN_PING):
                            self._wake(note.payload)
                        await conn.execute("SELECT 1")  # a silently dropped link shows here
            except psycopg.Error as exc:
                log.warning("LISTEN connection lost, retrying in %.1fs: %s",
                            delay, self._unavailable(exc))
            except Exception:
                log.exception("LISTEN task failed, retrying in %.1fs", delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, _BACKOFF_MAX)

    def _wake(self, queue: str) -> None:
        """A failing subscriber must not stop wake-ups for everyone else."""
        try:
            self._hub.notify(queue)
        except Exception:
            log.exception("a wake-up callback failed")
