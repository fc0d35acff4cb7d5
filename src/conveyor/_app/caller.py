"""The caller's own connection (``connection=``): a psycopg or sqlite3 connection as
it is, or a SQLAlchemy ``Session``, ``Connection``, ``AsyncSession`` or ``AsyncConnection``
unwrapped to the driver connection it holds, after its own transaction has begun, so the
insert commits, rolls back or rolls back to a savepoint with it.

SQLAlchemy objects are recognised by the names of their classes: this layer never
imports SQLAlchemy."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from .._job import Job
from .._storage import JobInsert

_SA = "sqlalchemy."
_SA_SYNC = {"sqlalchemy.orm.session.Session", "sqlalchemy.engine.base.Connection"}
_SA_ASYNC = {"sqlalchemy.ext.asyncio.session.AsyncSession",
             "sqlalchemy.ext.asyncio.engine.AsyncConnection"}
#: app dialect -> (SQLAlchemy dialect, its drivers whose connections the storage can use).
_SA_DRIVERS = {"postgres": ("postgresql", {"psycopg", "psycopg_async"}),
               "sqlite": ("sqlite", {"pysqlite", "aiosqlite"})}


def _sa_kind(connection: object) -> str | None:
    """"sync", "async", "other" (another SQLAlchemy object) or None (not SQLAlchemy)."""
    mro = type(connection).__mro__  # a subclass of Session of the caller's counts too
    if not any(c.__module__.startswith(_SA) for c in mro):
        return None
    names = {f"{c.__module__}.{c.__qualname__}" for c in mro}
    return "sync" if names & _SA_SYNC else "async" if names & _SA_ASYNC else "other"


def _sa_check(sa_conn: Any, dialect: str) -> None:
    name, drivers = _SA_DRIVERS[dialect]
    got = f"{sa_conn.dialect.name}+{sa_conn.dialect.driver}"
    if sa_conn.dialect.name != name or sa_conn.dialect.driver not in drivers:
        wanted = "postgresql+psycopg://" if dialect == "postgres" else "sqlite://"
        raise TypeError(f"connection= is a SQLAlchemy connection on {got}, but this app's "
                        f"database is {dialect}: use an engine on {wanted} to the same database")


def caller_connection(connection: Any, dialect: str) -> Any:
    """The driver connection behind ``connection`` for the sync API, its SQLAlchemy
    transaction begun as autobegin would on a first statement (else the caller's
    ``commit()`` would find no transaction and skip ours)."""
    kind = _sa_kind(connection)
    if kind is None:
        return connection
    if kind != "sync":
        hint = ("await enqueue_async / enqueue_many_async with it" if kind == "async"
                else "pass a Session or a Connection")
        raise TypeError(f"connection= does not take a {type(connection).__name__} here: {hint}")
    is_session = hasattr(connection, "get_bind")
    _sa_check(connection.get_bind() if is_session else connection, dialect)  # before connecting
    sa_conn = connection.connection() if is_session else connection
    if not sa_conn.in_transaction():
        sa_conn.begin()
    return sa_conn.connection.driver_connection


async def caller_connection_async(connection: Any, dialect: str) -> Any:
    """The same for the async API (a sync Session or Connection works too, blocking the
    loop for the insert as the sync API would)."""
    if _sa_kind(connection) != "async":
        return caller_connection(connection, dialect)
    is_session = hasattr(connection, "sync_session")
    _sa_check(connection.sync_session.get_bind() if is_session else connection, dialect)
    aconn = await connection.connection() if is_session else connection
    if not aconn.in_transaction():
        await aconn.begin()
    return (await aconn.get_raw_connection()).driver_connection


async def insert_on_thread_of(
    connection: Any, insert: Callable[[Sequence[JobInsert], Any], list[Job]],
    batch: Sequence[JobInsert],
) -> list[Job]:
    """aiosqlite keeps its sqlite3 connection on a thread of its own: insert there."""
    return cast(list[Job], await connection._execute(insert, batch, connection._conn))


