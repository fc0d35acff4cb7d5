"""The dashboard's gate: authentication, roles, security headers, and the checks every
action (a POST) must pass: write role, not read-only, same origin, valid CSRF token.

CSRF tokens: a random nonce lives in an HttpOnly, SameSite=Strict cookie; forms carry
HMAC(secret, nonce), so a token cannot be forged even by someone who can plant a
cookie, and a cross-site page can read neither.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import inspect
import secrets
from urllib.parse import parse_qsl, urlsplit

from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._settings import Role, Settings, normal_origin

CSRF_COOKIE = "conveyor_csrf"
CSRF_FIELD = "csrf_token"
MAX_FORM = 64 * 1024
#: Paths reachable without credentials (load balancers probe them).
PUBLIC = ("/healthz",)
#: The HTTP API (``conveyor.web.api``): its own bearer tokens, JSON errors, no cookies.
API_PREFIX = "/api/"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}


def route_path(scope: Scope) -> str:
    """The path inside the dashboard, without the prefix it is mounted at."""
    path: str = scope.get("path", "/")
    root: str = scope.get("root_path", "")
    return path[len(root):] or "/" if root and path.startswith(root) else path


def csrf_token(secret: bytes, nonce: str) -> str:
    return hmac.new(secret, nonce.encode("ascii", "replace"), hashlib.sha256).hexdigest()


async def resolve_role(settings: Settings, request: Request) -> Role:
    role: Role = "write"
    if settings.access is not None:
        result = settings.access(request)
        role = await result if inspect.isawaitable(result) else result
        if role not in ("write", "read", "deny"):
            role = "deny"  # an unexpected answer grants nothing
    if settings.read_only and role == "write":
        role = "read"
    return role


class Guard:
    """ASGI middleware in front of every dashboard route."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app, self.settings = app, settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        host = request.headers.get("host", "")
        if not self.settings.host_allowed(host):
            # DNS rebinding: a foreign site's name pointed at this address. Every route,
            # /healthz, /metrics and the API included, answers nothing but this line.
            line = (f"Host {host[:100]!r} is not served here: add it to the dashboard's "
                    "allowed hosts (--allowed-host, CONVEYOR_DASHBOARD_ALLOWED_HOSTS)")
            refusal: Response = (
                JSONResponse({"error": "host_not_served", "message": line}, 421)
                if route_path(scope).startswith(API_PREFIX) else PlainTextResponse(line + "\n", 421))
            await refusal(scope, receive, self._decorate(scope, send, None))
            return
        if route_path(scope).startswith(API_PREFIX):
            # The HTTP API checks its own bearer tokens and sets no cookie: no CSRF surface.
            await self.app(scope, receive, self._decorate(scope, send, None))
            return
        nonce = request.cookies.get(CSRF_COOKIE, "")
        fresh = len(nonce) != 64 or not all(c in "0123456789abcdef" for c in nonce)
        if fresh:
            nonce = secrets.token_hex(32)
        scope.setdefault("state", {})
        scope["state"]["csrf_nonce"] = nonce
        scope["state"]["role"] = "read"
        send = self._decorate(scope, send, nonce if fresh else None)
        if route_path(scope) not in PUBLIC:
            settings = self.settings
            given = request.headers.get("authorization")
            if settings.auth is not None and not settings.auth.check(given):
                if given and settings.auth_failure_delay > 0:
                    await asyncio.sleep(settings.auth_failure_delay)  # slows guessing
                await PlainTextResponse("authentication required", 401, headers={
                    "www-authenticate": 'Basic realm="Conveyor", charset="UTF-8"'})(
                    scope, receive, send)
                return
            role = await resolve_role(settings, request)
            if role == "deny":
                await PlainTextResponse("forbidden", 403)(scope, receive, send)
                return
            scope["state"]["role"] = role
        await self.app(scope, receive, send)

    def _decorate(self, scope: Scope, send: Send, new_nonce: str | None) -> Send:
        secure = "; Secure" if scope.get("scheme") == "https" else ""
        cookie_path = scope.get("root_path") or "/"

        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers.setdefault(name, value)
                headers.setdefault("cache-control", "no-store")
                if new_nonce is not None:
                    headers.append("set-cookie", f"{CSRF_COOKIE}={new_nonce}; Path={cookie_path}; "
                                   f"HttpOnly; SameSite=Strict{secure}")
            await send(message)

        return wrapped


def same_origin(request: Request, trusted: tuple[str, ...] = ()) -> bool:
    """Browsers say where a request comes from; anything but our own origin (or one of
    the ``trusted`` origins, e.g. a reverse proxy's public address) is refused."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True  # old browsers and non-browser clients: the CSRF token decides
    if origin != "null" and normal_origin(origin) in {normal_origin(t) for t in trusted}:
        return True
    host = request.headers.get("host", "")
    return origin != "null" and urlsplit(origin).netloc.lower() == host.lower()


async def read_form(request: Request) -> dict[str, str]:
    """An urlencoded form (the only kind the dashboard sends), read without
    python-multipart; bodies over 64 KiB are refused."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise HTTPException(415, "expected an urlencoded form")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            raise HTTPException(413, "form too large")
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=100)
    except (UnicodeDecodeError, ValueError):
        raise HTTPException(400, "malformed form") from None
    return dict(pairs)


async def action_form(request: Request, settings: Settings) -> dict[str, str]:
    """The form of an action, once the request passed every check; else 403."""
    if settings.read_only:
        raise HTTPException(403, "the dashboard is read-only")
    if request.state.role != "write":
        raise HTTPException(403, "your access is read-only")
    if not same_origin(request, settings.trusted_origins):
        raise HTTPException(403, "cross-site request refused")
    form = await read_form(request)
    token = form.get(CSRF_FIELD)
    nonce = request.cookies.get(CSRF_COOKIE)
    if not isinstance(token, str) or not nonce or not hmac.compare_digest(
            token, csrf_token(settings.secret, nonce)):
        raise HTTPException(403, "missing or invalid CSRF token; reload the page")
    return form


def form_text(form: dict[str, str], name: str, default: str = "") -> str:
    return form.get(name, default).strip()
