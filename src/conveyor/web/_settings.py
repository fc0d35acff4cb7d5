"""Dashboard settings and who may do what: authentication (basic or token, from code or
the environment, compared in constant time), roles, and the loopback rule."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hmac
import ipaddress
import os
import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal, Protocol

from ._redact import Redactor, redact_secrets

if TYPE_CHECKING:
    from starlette.requests import Request

#: What a request may do: everything, look only, or nothing.
Role = Literal["write", "read", "deny"]
#: ``access(request) -> role`` for mounted use: plug in your own users and permissions.
AccessHook = Callable[["Request"], "Role | Awaitable[Role]"]

ENV_USER = "CONVEYOR_DASHBOARD_USER"
ENV_PASSWORD = "CONVEYOR_DASHBOARD_PASSWORD"
ENV_TOKEN = "CONVEYOR_DASHBOARD_TOKEN"
ENV_SECRET = "CONVEYOR_DASHBOARD_SECRET"


class Auth(Protocol):
    """Checks the ``Authorization`` header of a request."""

    def check(self, header: str | None) -> bool: ...


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def _basic(header: str | None) -> tuple[str, str] | None:
    if not header or header[:6].lower() != "basic ":
        return None
    try:
        decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep else None


@dataclasses.dataclass(frozen=True, slots=True)
class BasicAuth:
    """HTTP basic auth with one user. Example: ``create_app(app, auth=BasicAuth("ops", pw))``"""

    username: str
    password: str

    def __post_init__(self) -> None:
        if not self.username or not self.password:
            raise ValueError("BasicAuth needs a non-empty username and password")

    def check(self, header: str | None) -> bool:
        given = _basic(header)
        if given is None:
            return False
        # Both comparisons always run: the time taken says nothing about which failed.
        return _same(given[0], self.username) & _same(given[1], self.password)


@dataclasses.dataclass(frozen=True, slots=True)
class TokenAuth:
    """A shared token: ``Authorization: Bearer <token>`` (scrapers, scripts), or as the
    password of basic auth with any user name (browsers)."""

    token: str

    def __post_init__(self) -> None:
        if len(self.token) < 16:
            raise ValueError("a dashboard token must be at least 16 characters")

    def check(self, header: str | None) -> bool:
        if header and header[:7].lower() == "bearer ":
            return _same(header[7:].strip(), self.token)
        given = _basic(header)
        return given is not None and _same(given[1], self.token)


def auth_from_env(environ: dict[str, str] | None = None) -> Auth | None:
    """``CONVEYOR_DASHBOARD_TOKEN``, else ``CONVEYOR_DASHBOARD_USER`` and
    ``CONVEYOR_DASHBOARD_PASSWORD``, else None (no auth)."""
    env = os.environ if environ is None else environ
    if env.get(ENV_TOKEN):
        return TokenAuth(env[ENV_TOKEN])
    user, password = env.get(ENV_USER), env.get(ENV_PASSWORD)
    if user or password:
        if not (user and password):
            raise ValueError(f"set both {ENV_USER} and {ENV_PASSWORD}, or neither")
        return BasicAuth(user, password)
    return None


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1)."""
    if host.strip("[]").lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    """Everything ``create_app`` was given."""

    auth: Auth | None = None
    read_only: bool = False
    access: AccessHook | None = None
    redact: Redactor = redact_secrets
    #: Seconds between live refreshes in the browser (0: no live updates).
    poll_interval: float = 2.0
    #: Most jobs a bulk action changes at once.
    bulk_cap: int = 10_000
    #: Where a count of matching jobs stops ("10,000+").
    count_cap: int = 10_000
    #: Signs CSRF tokens; random per process unless given (several replicas need one).
    secret: bytes = dataclasses.field(default_factory=lambda: secrets.token_bytes(32))
    title: str = "Conveyor"

    def __post_init__(self) -> None:
        if not 1 <= self.bulk_cap <= 100_000:
            raise ValueError("bulk_cap must be from 1 to 100000")
        if self.poll_interval < 0:
            raise ValueError("poll_interval must be >= 0")


def secret_from_env() -> bytes | None:
    value = os.environ.get(ENV_SECRET)
    return value.encode("utf-8") if value else None
