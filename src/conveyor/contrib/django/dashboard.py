"""The dashboard in Django's URLs, behind Django's staff login.

    urlpatterns = [path("ops/jobs/", include(dashboard_urls()))]

Each request passes Django first: an anonymous visitor is sent to ``LOGIN_URL``, a
signed-in user who is not active staff gets 403, and Django checks the Host against
``ALLOWED_HOSTS``. The request is then handed, in-process, to the dashboard's own ASGI
app (``conveyor.web.create_app``), which keeps every defence of its own: its CSRF
token on every action (so the view is exempt from Django's CSRF middleware, whose token
the dashboard's forms do not carry), the Origin and Sec-Fetch-Site checks, its security
headers. ``CSRF_TRUSTED_ORIGINS`` are its trusted origins.

The dashboard runs on one event loop of its own per process (a background thread), so
that its database connections are opened once, whether Django serves over ASGI or WSGI.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from http.cookies import SimpleCookie
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.tasks import task_backends
from django.urls import URLPattern, re_path
from django.views.decorators.csrf import csrf_exempt

from conveyor._portal import Portal

from .backend import ConveyorBackend

if TYPE_CHECKING:
    from conveyor.web import Role

#: The dashboard's role for a signed-in user who passed the staff check.
RoleOf = Callable[[Any], "Role"]
_ROLE_KEY = "conveyor.django.role"
#: Computed by Django from the body it sends.
_SKIPPED_HEADERS = frozenset({"content-length", "transfer-encoding", "connection"})


def staff_can_write(user: Any) -> Role:
    """Default roles: every active staff member may act; use ``role=`` to narrow it
    (e.g. ``lambda u: "write" if u.is_superuser else "read"``)."""
    return "write"


def _access(request: Any) -> Role:
    role: Role = request.scope.get(_ROLE_KEY, "deny")
    return role


class _Mounted:
    """One dashboard ASGI app and the loop it runs on."""

    def __init__(self, backend: str, options: dict[str, Any]) -> None:
        self.backend, self.options = backend, options
        self._asgi: Any = None
        self._portal: Portal | None = None

    def loop(self) -> tuple[Any, asyncio.AbstractEventLoop]:
        if self._asgi is None:
            from conveyor.web import create_app

            found = task_backends[self.backend]
            if not isinstance(found, ConveyorBackend):
                raise TypeError(f"TASKS[{self.backend!r}] is not a ConveyorBackend")
            app = found.app
            options = {"trusted_origins": list(settings.CSRF_TRUSTED_ORIGINS),
                       "source": "django", **self.options}
            # Django has checked the Host against ALLOWED_HOSTS before the view runs.
            self._asgi = create_app(app, access=_access, allowed_hosts=["*"], **options)
            self._portal = Portal(app.close_async)
        assert self._portal is not None
        if self._portal.loop is None:
            self._portal.call(asyncio.sleep(0))
        loop = self._portal.loop
        assert loop is not None
        return self._asgi, loop


def scope_of(request: HttpRequest, path: str, role: Role) -> dict[str, Any]:
    """The ASGI scope of ``request``, mounted at the URL prefix before ``path``."""
    full = request.path
    prefix = full[: len(full) - len(path)] if path and full.endswith(path) else full
    host = request.get_host()  # raises DisallowedHost (400) for a Host not allowed
    headers = [(k.lower().encode("latin-1"), v.encode("latin-1"))
               for k, v in request.headers.items() if k.lower() != "host"]
    headers.append((b"host", host.encode("latin-1")))
    port = request.get_port()
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
        "method": request.method or "GET", "scheme": request.scheme or "http",
        "path": full, "raw_path": full.encode("utf-8"), "root_path": prefix.rstrip("/"),
        "query_string": request.META.get("QUERY_STRING", "").encode("latin-1"),
        "headers": headers, "server": (host.rsplit(":", 1)[0], int(port) if port else 80),
        "client": (request.META.get("REMOTE_ADDR", ""), 0), "state": {}, _ROLE_KEY: role,
    }


async def call_asgi(app: Any, scope: dict[str, Any], body: bytes
                    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """Run one request through an ASGI app; its status, headers and whole body."""
    sent = False
    start: dict[str, Any] = {}
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return int(start.get("status", 500)), list(start.get("headers", [])), b"".join(chunks)


def to_response(status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> HttpResponse:
    response = HttpResponse(body, status=status)
    del response.headers["Content-Type"]
    for raw_name, raw_value in headers:
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        if name == "set-cookie":
            response.cookies.load(SimpleCookie(value))
        elif name not in _SKIPPED_HEADERS:
            old = response.headers.get(name)
            response.headers[name] = f"{old}, {value}" if old else value
    return response


def dashboard_urls(backend: str = "default", *, role: RoleOf = staff_can_write,
                   **create_app_options: Any) -> list[URLPattern]:
    """URL patterns serving the dashboard of ``TASKS[backend]`` to active staff.

    ``create_app_options`` go to ``conveyor.web.create_app`` (``read_only=True``,
    ``title=``, ``secret=`` for several processes behind a load balancer, ...).
    """
    mounted = _Mounted(backend, create_app_options)

    async def dashboard(request: HttpRequest, path: str = "") -> HttpResponse:
        user = await request.auser()
        if not user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not (user.is_active and getattr(user, "is_staff", False)):
            raise PermissionDenied("the dashboard is for staff")
        scope = scope_of(request, path, role(user))
        asgi, loop = mounted.loop()
        future = asyncio.run_coroutine_threadsafe(call_asgi(asgi, scope, request.body), loop)
        return to_response(*await asyncio.wrap_future(future))

    return [re_path(r"^(?P<path>.*)$", csrf_exempt(dashboard), name="conveyor-dashboard")]
