"""PostgreSQL connection settings and errors: the config, connection options, the JSON
loader every connection uses, and the one-line, password-free error an operator sees
when the server cannot be used."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import set_json_loads

from ..._errors import DatabaseUnavailableError, StorageFullError
from ..rows import loads

#: Server-side SQLSTATEs that mean "the server went away", beyond class 08.
_GONE_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "53300"})
#: disk_full: the server could not extend a file; the statement's transaction is undone.
_DISK_FULL = "53100"


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


def connect_kwargs(config: PostgresConfig) -> dict[str, Any]:
    # libpq takes whole seconds and treats anything under 2 as 2.
    return {"autocommit": True, "connect_timeout": max(2, round(config.connect_timeout))}


def _lenient_loads(data: str | bytes) -> Any:
    """jsonb to Python with the rows' one JSON policy (``rows.loads``): a value Python
    cannot read back (nested past the recursion limit) becomes None instead of failing
    every read of its row, claims included."""
    try:
        text = data.decode() if isinstance(data, bytes) else data
    except ValueError:
        return None
    return loads(text)


async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
    set_json_loads(_lenient_loads, conn)


class Errors:
    """Turns driver errors into what operators read, never showing the password."""

    def __init__(self, url: str) -> None:
        self.redacted = _redact(url)

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
            if state is None or state.startswith("08") or state in _GONE_SQLSTATES:
                raise self.unavailable(exc) from exc
            raise


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
