"""PostgreSQL connection settings and errors: the config (with Conveyor's own URL
options), connection options, the JSON loader every connection uses, and the one-line,
password-free error an operator sees when the server cannot be used.

Behind a transaction pooler (PgBouncer ``pool_mode = transaction``) consecutive
statements of one client connection may run on different server connections, so
nothing may outlive a transaction: ``?conveyor_pooler=transaction`` turns off
server-side prepared statements, and LISTEN (a session feature) moves to
``listen_url`` (a direct connection) or gives way to polling (``listener.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import select
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import DictRow, TupleRow, tuple_row
from psycopg.types.json import set_json_loads

from ..._errors import DatabaseUnavailableError, StorageFullError
from ..rows import loads

#: Server-side SQLSTATEs that mean "the server went away", beyond class 08.
_GONE_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "53300"})
#: disk_full: the server could not extend a file; the statement's transaction is undone.
_DISK_FULL = "53100"
#: duplicate_prepared_statement, invalid_sql_statement_name: what a transaction pooler
#: does to prepared statements (they land on, or are missing from, another server
#: connection).
_POOLER_SQLSTATES = frozenset({"42P05", "26000"})
#: protocol_violation: "bind message supplies 5 parameters, but prepared statement
#: "_pg3_15" requires 1" (another client's statement of the same name on that server
#: connection).
_PROTOCOL_VIOLATION = "08P01"
#: Conveyor's own URL query options, removed before the URL reaches libpq.
POOLER_OPTION = "conveyor_pooler"
LISTEN_OPTION = "conveyor_listen_url"
#: The environment's listen URL, used when the URL has none.
LISTEN_ENV = "CONVEYOR_LISTEN_URL"
#: The values ``conveyor_pooler`` accepts ("none": a direct connection, the default).
POOLER_MODES = ("none", "transaction")
#: psycopg's ``prepare=`` for Conveyor's statements on a caller's connection: never.
#: That connection may go through a transaction pooler Conveyor's own URL does not name
#: (a Django database behind PgBouncer), where a statement prepared on one server
#: connection collides on another; a few statements per transaction gain little from it.
CALLER_PREPARE = False


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
    #: "transaction" behind a transaction pooler: no server-side prepared statements,
    #: no LISTEN on ``url``.
    pooler: str = "none"
    #: Where LISTEN connects (directly to PostgreSQL, never through a transaction
    #: pooler); None: ``url``, or polling when ``pooler`` is "transaction".
    listen_url: str | None = None

    @property
    def pooled(self) -> bool:
        return self.pooler == "transaction"


def config_from_url(url: str, max_size: int,
                    environ: Mapping[str, str] | None = None) -> PostgresConfig:
    """The config for a ``postgresql://`` URL: Conveyor's own query options
    (``conveyor_pooler``, ``conveyor_listen_url``) are taken out, the rest goes to libpq.
    ``CONVEYOR_LISTEN_URL`` supplies the listen URL when the URL does not."""
    env = os.environ if environ is None else environ
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    ours = {k: v for k, v in query if k in (POOLER_OPTION, LISTEN_OPTION)}
    pooler = ours.get(POOLER_OPTION, "none").strip().lower() or "none"
    if pooler not in POOLER_MODES:
        raise ValueError(
            f"{POOLER_OPTION}={ours[POOLER_OPTION]!r} in the database URL: expected one of "
            f"{', '.join(POOLER_MODES)} (use 'transaction' behind PgBouncer in transaction mode)"
        )
    listen_url = ours.get(LISTEN_OPTION) or env.get(LISTEN_ENV, "").strip() or None
    if listen_url is not None and urlsplit(listen_url).scheme.lower() not in (
            "postgresql", "postgres"):
        raise ValueError(
            f"the listen URL ({LISTEN_OPTION} or {LISTEN_ENV}) must be a postgresql:// URL "
            "that reaches PostgreSQL directly"
        )
    if ours:
        rest = urlencode([(k, v) for k, v in query if k not in ours])
        url = urlunsplit(parts._replace(query=rest))
    return PostgresConfig(url=url, max_size=max_size, pooler=pooler, listen_url=listen_url)


def connect_kwargs(config: PostgresConfig) -> dict[str, Any]:
    # libpq takes whole seconds and treats anything under 2 as 2.
    kwargs: dict[str, Any] = {
        "autocommit": True, "connect_timeout": max(2, round(config.connect_timeout))}
    if config.pooled:  # a prepared statement would outlive its transaction
        kwargs["prepare_threshold"] = None
    if config.channel != "conveyor_jobs":  # the triggers' NOTIFY channel (schema 10)
        kwargs["options"] = f"-c conveyor.channel={config.channel}"
    return kwargs


def prepare_threshold(config: PostgresConfig, threshold: int) -> int | None:
    """``threshold`` on a direct connection; never prepare behind a transaction pooler."""
    return None if config.pooled else threshold


def _lenient_loads(data: str | bytes) -> Any:
    """jsonb to Python with the rows' one JSON policy (``rows.loads``): a value Python
    cannot read back (nested past the recursion limit) becomes None instead of failing
    every read of its row, claims included."""
    try:
        text = data.decode() if isinstance(data, bytes) else data
    except ValueError:
        return None
    return loads(text)


#: The session time zone of Conveyor's connections. Times are instants either way, but
#: psycopg makes a ``timestamptz`` in the session's zone: under a named zone (a server
#: initialised on a host in ``Etc/UTC`` reports that name) each value costs a zoneinfo
#: conversion, 1.6 µs on CPython 3.13 against 0.3 µs in ``UTC`` (``datetime.UTC``), and
#: a claim reads four per job. In UTC a Job's times are ``datetime.UTC``-aware, as
#: SQLite's are; the SQL never depends on the session's zone (it names 'UTC' itself).
SESSION_TIME_ZONE = b"UTC"
_SET_TIME_ZONE = "SET TIME ZONE 'UTC'"


def _needs_utc(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    return conn.pgconn.parameter_status(b"TimeZone") != SESSION_TIME_ZONE


async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
    set_json_loads(_lenient_loads, conn)
    if _needs_utc(conn):  # a round trip once per connection, only where it is needed
        await conn.execute(_SET_TIME_ZONE)


def configure_blocking(conn: psycopg.Connection[Any]) -> None:
    """``configure`` for a synchronous connection of Conveyor's own."""
    if _needs_utc(conn):
        conn.execute(_SET_TIME_ZONE)


class PooledConnection(psycopg.AsyncConnection[DictRow]):
    """A connection of Conveyor's own pools, which keeps one tuple-row cursor for the
    single-row statements of the hot paths (a lone enqueue): a cursor made anew per
    statement looks up its parameters' dumpers anew too, which costs a lone insert
    about a fifth of its client CPU."""

    _kept: psycopg.AsyncCursor[TupleRow] | None = None

    def kept_cursor(self) -> psycopg.AsyncCursor[TupleRow]:
        """The connection's kept cursor (one statement at a time, as the connection)."""
        cur = self._kept
        if cur is None or cur.closed:
            cur = self._kept = self.cursor(row_factory=tuple_row)
        return cur


class BlockingConnection(psycopg.Connection[Any]):
    """``PooledConnection`` for the sync enqueue's connections (``task.enqueue()``)."""

    _kept: psycopg.Cursor[TupleRow] | None = None

    def kept_cursor(self) -> psycopg.Cursor[TupleRow]:
        cur = self._kept
        if cur is None or cur.closed:
            cur = self._kept = self.cursor(row_factory=tuple_row)
        return cur


def tuple_cursor(conn: psycopg.AsyncConnection[Any]) -> psycopg.AsyncCursor[TupleRow]:
    """A tuple-row cursor on ``conn``: the kept one of a pooled connection, else new (a
    caller's connection)."""
    if isinstance(conn, PooledConnection):
        return conn.kept_cursor()
    return conn.cursor(row_factory=tuple_row)


def tuple_cursor_sync(conn: psycopg.Connection[Any]) -> psycopg.Cursor[TupleRow]:
    """``tuple_cursor`` of a blocking connection."""
    if isinstance(conn, BlockingConnection):
        return conn.kept_cursor()
    return conn.cursor(row_factory=tuple_row)


def server_hung_up(conn: psycopg.AsyncConnection[Any] | psycopg.Connection[Any]) -> bool:
    """True when an idle connection has something to read: the server closed it (a
    restart or failover sends FATAL 57P01 and hangs up) or sent an unasked message.
    One poll of the socket, no round trip: cheap enough for every checkout."""
    if conn.closed:
        return True
    try:
        poller = select.poll()
        poller.register(conn.pgconn.socket, select.POLLIN | select.POLLPRI)
        return bool(poller.poll(0))
    except (OSError, ValueError, psycopg.Error):
        return True


async def shares_server_sessions(first: psycopg.AsyncConnection[Any], url: str,
                                 config: PostgresConfig) -> bool:
    """True when a session setting made on ``first`` shows up on a second connection:
    both ran on one server connection, so a transaction pooler (PgBouncer
    ``pool_mode = transaction``) hands server connections between clients and a
    prepared statement would collide. A direct or session-pooled connection never
    shares. A pooler that hands out another server connection this time reads as
    False; the prepared-statement errors themselves are the fallback."""
    token = secrets.token_hex(8)
    await first.execute("SELECT set_config('conveyor.pooler_probe', %s, false)", [token])
    try:
        second = await psycopg.AsyncConnection.connect(url, **connect_kwargs(config))
    except psycopg.Error:
        return False
    try:
        cur = await second.execute(
            "SELECT current_setting('conveyor.pooler_probe', true),"
            " set_config('conveyor.pooler_probe', '', false)")
        row = await cur.fetchone()
        return row is not None and row[0] == token
    finally:
        await second.close()


def pooler_detected_message(where: str, poll_interval: float) -> str:
    """The one warning a storage logs when it finds a transaction pooler by itself."""
    return (
        f"{where} is behind a transaction pooler (PgBouncer pool_mode = transaction?) that "
        f"the URL does not name: Conveyor turned off server-side prepared statements and "
        f"LISTEN (workers poll every {poll_interval:.1f}s). Add ?{POOLER_OPTION}=transaction "
        f"to the database URL to say so (and {LISTEN_OPTION} or {LISTEN_ENV} with a direct "
        f"URL for instant wake-ups)"
    )


class Errors:
    """Turns driver errors into what operators read, never showing the password."""

    def __init__(self, url: str, pooled: bool = False,
                 on_pooler: Callable[[], None] | None = None) -> None:
        self.redacted = _redact(url)
        self.pooled = pooled
        #: Called at the first prepared-statement error of a transaction pooler the URL
        #: does not name, whichever path met it (pool, sync enqueue): switch modes.
        self.on_pooler = on_pooler

    def where(self) -> str:
        return self.redacted[0] if self.redacted else "the database"

    def unavailable(self, exc: BaseException) -> DatabaseUnavailableError:
        """One line, never the password: this message goes straight to operators."""
        if self.redacted is None:
            return DatabaseUnavailableError(
                "the PostgreSQL URL is malformed; expected postgresql://user:password@host:port/db"
            )
        where, password = self.redacted
        lines = str(exc).strip().splitlines()
        reason = lines[0].strip() if lines else type(exc).__name__
        if password:
            reason = reason.replace(password, "***")
        return DatabaseUnavailableError(f"cannot use PostgreSQL at {where}: {reason}")

    @contextlib.contextmanager
    def translate(self) -> Iterator[None]:
        """Lost or refused connections become DatabaseUnavailableError, a full disk
        StorageFullError (a subclass); errors of the statement itself (deadlock,
        serialization, bad data) stay what they are."""
        try:
            yield
        except psycopg.OperationalError as exc:
            state = exc.sqlstate
            if state == _DISK_FULL:
                raise StorageFullError(
                    f"the database disk is full ({self.where()}): nothing was written"
                ) from exc
            if is_pooler_error(exc) and not self.pooled:
                raise self._pooler_found(exc) from exc
            if state is None or state.startswith("08") or state in _GONE_SQLSTATES:
                raise self.unavailable(exc) from exc
            raise
        except psycopg.DatabaseError as exc:
            if is_pooler_error(exc) and not self.pooled:
                raise self._pooler_found(exc) from exc
            raise

    def _pooler_found(self, exc: BaseException) -> DatabaseUnavailableError:
        error = self.behind_pooler(exc)
        if self.on_pooler is not None:
            self.on_pooler()
        return error

    def behind_pooler(self, exc: BaseException) -> DatabaseUnavailableError:
        """Prepared statements that collide or vanish: a transaction pooler (PgBouncer)
        sits in front of the server and the URL does not say so."""
        reason = str(self.unavailable(exc))
        return DatabaseUnavailableError(
            f"{reason} (a transaction pooler such as PgBouncer in front of PostgreSQL? "
            f"add ?{POOLER_OPTION}=transaction to the database URL)"
        )


def is_pooler_error(exc: BaseException) -> bool:
    """A prepared statement that collides or vanishes: what a transaction pooler does."""
    current: BaseException | None = exc
    while current is not None:
        if isinstance(current, psycopg.Error) and (
                current.sqlstate in _POOLER_SQLSTATES or (
                    current.sqlstate == _PROTOCOL_VIOLATION
                    and "prepared statement" in str(current))):
            return True
        current = current.__cause__
    return False


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
