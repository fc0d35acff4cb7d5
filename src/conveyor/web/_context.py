"""What every route handler gets: a ``Context`` with the settings, the templates, the
operator API and the page helpers (render, flash redirects, audit log)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote, unquote

import jinja2
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from .._app.operations import Operations
from .._errors import DatabaseUnavailableError, SchemaError
from ._format import FILTERS
from ._security import csrf_token
from ._settings import Settings

log = logging.getLogger("conveyor.web")

FLASH_COOKIE = "conveyor_flash"
#: Flash codes -> messages; only these are ever shown, with the argument escaped.
FLASHES = {
    "retried": "Job {} is back in its queue.",
    "cancelled": "Cancel of job {} recorded.",
    "discarded": "Job {} was discarded.",
    "deleted": "Job {} was deleted.",
    "bulk-retry": "{} job(s) retried.",
    "bulk-discard": "{} job(s) discarded.",
    "paused": "Queue {} paused.",
    "resumed": "Queue {} resumed.",
    "concurrency": "Concurrency of queue {} changed.",
    "schedule-paused": "Schedule {} paused.",
    "schedule-resumed": "Schedule {} resumed.",
    "triggered": "Schedule ran now as job {}.",
    "workflow-cancelled": "{} job(s) of the workflow cancelled.",
    "error": "{}",
}
NAV = [("/", "Overview"), ("/queues", "Queues"), ("/jobs", "Jobs"), ("/failures", "Failures"),
       ("/schedules", "Schedules"), ("/limiters", "Limiters"), ("/workers", "Workers")]


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("conveyor.web", "templates"),
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
    )
    env.filters.update(FILTERS)
    return env


#: A route handler: a plain function of the context and the request.
Handler = Callable[["Context", Request], Awaitable[Response]]
#: What a route answers when the database cannot be used (``reason`` is one line).
Fallback = Callable[["Context", Request, str], Response]


def unreachable_page(ctx: Context, request: Request, reason: str) -> Response:
    """The 503 page every page shows while the database cannot be used."""
    return ctx.render(request, "error.html", "", status=503, status_code=503,
                      detail=f"The database is unreachable: {reason}", live=False,
                      headers={"retry-after": "5"})


class Context:
    """One dashboard's settings, templates and operations, shared by its handlers."""

    def __init__(self, ops: Operations, settings: Settings) -> None:
        self.ops = ops
        self.app = ops.app
        self.settings = settings
        self.templates = Jinja2Templates(env=environment())

    def bind(self, handler: Handler,
             fallback: Fallback = unreachable_page) -> Callable[[Request], Awaitable[Response]]:
        """``handler`` as a Starlette endpoint of this dashboard: it has
        ``settings.timeout`` seconds, and when the database is down or late the request
        gets ``fallback`` (a 503 page) at once instead of an error or a hang."""
        limit = self.settings.timeout

        async def endpoint(request: Request) -> Response:
            try:
                async with asyncio.timeout(limit):
                    return await handler(self, request)
            except TimeoutError:
                reason = f"it did not answer within {limit:g} s"
            except (DatabaseUnavailableError, SchemaError) as exc:
                reason = " ".join(str(exc).split())[:300]
            log.warning("dashboard %s %s: database unreachable: %s", request.method,
                        request.url.path, reason)
            return fallback(self, request, reason)

        endpoint.__name__ = handler.__name__
        return endpoint

    @staticmethod
    def url(request: Request, path: str) -> str:
        root: str = request.scope.get("root_path", "")
        return root + path

    def render(self, request: Request, template: str, nav: str, status: int = 200,
               headers: dict[str, str] | None = None, **context: Any) -> Response:
        """A page, or with ``X-Conveyor-Live: 1`` only its live part (for refreshes)."""
        fragment = request.headers.get("x-conveyor-live") == "1"
        flash = None if fragment else self._flash(request)
        role = request.state.role
        ctx = {
            "fragment": fragment, "flash": flash, "nav": NAV, "active": nav,
            "url": lambda path: self.url(request, path),
            "csrf": csrf_token(self.settings.secret, request.state.csrf_nonce),
            "can_act": role == "write" and not self.settings.read_only,
            "read_only": self.settings.read_only or role != "write",
            "title": self.settings.title, "poll": self.settings.poll_interval,
            "version": _version(), **context,
        }
        response = self.templates.TemplateResponse(request, template, ctx, status_code=status,
                                                   headers=headers)
        if flash is not None:
            response.delete_cookie(FLASH_COOKIE, path=request.scope.get("root_path") or "/")
        return response

    @staticmethod
    def _flash(request: Request) -> tuple[str, str] | None:
        raw = unquote(request.cookies.get(FLASH_COOKIE, ""))
        code, _, arg = raw.partition("|")
        if code not in FLASHES:
            return None
        return ("error" if code == "error" else "ok", FLASHES[code].format(arg[:300]))

    def redirect(self, request: Request, path: str, code: str, arg: object = "") -> Response:
        """303 to a page of ours with a flash message."""
        response = RedirectResponse(self.url(request, safe_path(path)), status_code=303)
        response.set_cookie(FLASH_COOKIE, quote(f"{code}|{arg}"), max_age=60,
                            path=request.scope.get("root_path") or "/", httponly=True,
                            samesite="strict", secure=request.url.scheme == "https")
        return response

    @staticmethod
    def user(request: Request) -> str | None:
        """The basic-auth user name, when the dashboard has one (else None)."""
        return _basic_user(request.headers.get("authorization"))

    def audit(self, request: Request, action: str, **fields: object) -> None:
        """Every action is logged, with who did it when basic auth says so."""
        user = _basic_user(request.headers.get("authorization"))
        log.info("dashboard action %s %s", action, fields, extra={"user": user or "-"})


def safe_path(path: str) -> str:
    """Only paths inside the dashboard: never another site (``//evil``, ``https:``)."""
    if not path.startswith("/") or path.startswith("//") or "\\" in path:
        return "/"
    return path


def _basic_user(header: str | None) -> str | None:
    from ._settings import _basic

    given = _basic(header)
    return given[0] if given else None


def _version() -> str:
    from .. import __version__

    return __version__
