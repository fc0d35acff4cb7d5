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
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Literal, Protocol

from .._redact import Redactor, redact_secrets

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
ENV_ALLOWED_HOSTS = "CONVEYOR_DASHBOARD_ALLOWED_HOSTS"
ENV_TRUSTED_ORIGINS = "CONVEYOR_DASHBOARD_TRUSTED_ORIGINS"
#: Tokens of the HTTP API (``/api/v1/``): full access, and read-only (comma-separated
#: for several, e.g. while rotating).
ENV_API_TOKEN = "CONVEYOR_API_TOKEN"
ENV_API_READONLY_TOKEN = "CONVEYOR_API_READONLY_TOKEN"
#: Shortest password or token accepted (both guard the same dashboard).
MIN_SECRET = 16
#: ``Host`` names always accepted: a DNS-rebinding page can never make a browser send them.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


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
        if len(self.password) < MIN_SECRET:
            raise ValueError(f"a dashboard password must be at least {MIN_SECRET} characters")

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
        if len(self.token) < MIN_SECRET:
            raise ValueError(f"a dashboard token must be at least {MIN_SECRET} characters")

    def check(self, header: str | None) -> bool:
        if header and header[:7].lower() == "bearer ":
            return _same(header[7:].strip(), self.token)
        given = _basic(header)
        return given is not None and _same(given[1], self.token)


@dataclasses.dataclass(frozen=True, slots=True)
class ApiToken:
    """A bearer token of the HTTP API; ``read_only=True`` allows GET requests only.

    Example: ``create_app(app, api_tokens=[ApiToken(ci_token), ApiToken(grafana_token,
    read_only=True)])`` (a plain string is a full-access token)."""

    token: str
    read_only: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.token, str) or len(self.token) < MIN_SECRET:
            raise ValueError(f"an API token must be at least {MIN_SECRET} characters")
        if any(c.isspace() or c == "," for c in self.token) or not self.token.isascii():
            raise ValueError("an API token is ASCII without spaces or commas")


def as_api_tokens(given: str | ApiToken | Iterable[str | ApiToken]) -> tuple[ApiToken, ...]:
    """``create_app(api_tokens=...)`` as ``ApiToken``s: a string is a full-access token."""
    items = [given] if isinstance(given, str | ApiToken) else list(given)
    return tuple(t if isinstance(t, ApiToken) else ApiToken(t) for t in items)


def api_tokens_from_env(environ: Mapping[str, str] | None = None) -> tuple[ApiToken, ...]:
    """``CONVEYOR_API_TOKEN`` (full access) and ``CONVEYOR_API_READONLY_TOKEN`` (GET
    only), each one token or several comma-separated; none: the API is off."""
    env = os.environ if environ is None else environ
    return (*(ApiToken(t) for t in split_names(env.get(ENV_API_TOKEN))),
            *(ApiToken(t, read_only=True) for t in split_names(env.get(ENV_API_READONLY_TOKEN))))


def api_role(tokens: tuple[ApiToken, ...], header: str | None) -> Role | None:
    """``"write"`` or ``"read"`` for a known bearer token, else None. Every token is
    compared, in constant time, whichever matches."""
    if not header or header[:7].lower() != "bearer ":
        return None
    given = header[7:].strip()
    found: Role | None = None
    for candidate in tokens:
        if _same(given, candidate.token) and found != "write":
            found = "read" if candidate.read_only else "write"
    return found


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
    #: ``Host`` names served besides the loopback ones (``"*"``: any, ``"*.example.com"``:
    #: its subdomains); any other Host is refused, against DNS rebinding.
    allowed_hosts: tuple[str, ...] = ()
    #: Origins (``https://ops.example.com``) whose actions are accepted even though the
    #: ``Host`` the dashboard sees differs (a reverse proxy that rewrites it).
    trusted_origins: tuple[str, ...] = ()
    #: Seconds a request may spend on the database before it gets a 503 page.
    timeout: float = 2.5
    #: Seconds a failed authentication waits before its 401 (slows password guessing).
    auth_failure_delay: float = 0.5
    #: Who acts, as the state-change events of the dashboard's actions name it
    #: (``"django"`` when mounted in Django's URLs).
    source: str = "dashboard"
    #: Bearer tokens of the HTTP API under ``/api/v1/`` (none: the API answers 404).
    api_tokens: tuple[ApiToken, ...] = ()

    def __post_init__(self) -> None:
        if not 1 <= self.bulk_cap <= 100_000:
            raise ValueError("bulk_cap must be from 1 to 100000")
        if self.poll_interval < 0:
            raise ValueError("poll_interval must be >= 0")
        if self.timeout <= 0:
            raise ValueError("timeout must be > 0")
        for origin in self.trusted_origins:
            if origin != normal_origin(origin):
                raise ValueError(f"a trusted origin is scheme://host[:port], got {origin!r}")

    def host_allowed(self, host_header: str) -> bool:
        """Is ``host_header`` (``name[:port]``) one of the names this dashboard serves?"""
        name = host_name(host_header)
        if not name:
            return False
        for pattern in (*LOOPBACK_HOSTS, *self.allowed_hosts):
            wanted = pattern.strip().lower()
            if wanted == "*" or host_name(wanted) == name:
                return True
            if wanted.startswith("*.") and name.endswith(wanted[1:]):
                return True
        return False


#: Every setting's default, written once (in ``Settings``): ``create_app``'s keyword
#: arguments and ``conveyor dashboard``'s options default to these.
DEFAULT_SETTINGS = Settings(secret=b"unused: create_app draws a random one")


def host_name(host_header: str) -> str:
    """The name of a ``Host`` header, without the port, lowercase (IPv6 unbracketed)."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    if host.count(":") > 1:
        return host  # a bare IPv6 address (not valid in Host, but harmless)
    return host.partition(":")[0].rstrip(".")


def normal_origin(origin: str) -> str:
    """``scheme://host[:port]`` lowercase, without a trailing slash."""
    return origin.strip().rstrip("/").lower()


def split_names(value: str | None) -> tuple[str, ...]:
    """A comma- or space-separated list from the environment or a flag."""
    return tuple(n for n in (value or "").replace(",", " ").split() if n)


def allowed_hosts_from_env() -> tuple[str, ...]:
    return split_names(os.environ.get(ENV_ALLOWED_HOSTS))


def trusted_origins_from_env() -> tuple[str, ...]:
    return split_names(os.environ.get(ENV_TRUSTED_ORIGINS))


def secret_from_env() -> bytes | None:
    value = os.environ.get(ENV_SECRET)
    return value.encode("utf-8") if value else None
