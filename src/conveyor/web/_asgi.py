"""Assembling the dashboard: one context, the routes of each page group, static
files, the gate and error pages."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

from .._app.operations import Operations
from . import (
    _failures,
    _jobs,
    _limiters,
    _overview,
    _queues,
    _schedules,
    _workers,
    _workflows,
)
from ._context import Context
from ._security import Guard
from ._settings import Settings
from .api import _routes as api

if TYPE_CHECKING:
    from .._app import Conveyor

PAGE_GROUPS = (_overview, _queues, _jobs, _failures, _schedules, _limiters, _workers,
               _workflows)


def error_page(ctx: Context) -> Callable[[Request, Exception], Awaitable[Response]]:
    async def error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if "state" not in request.scope or "csrf_nonce" not in request.scope["state"]:
            return PlainTextResponse(exc.detail, exc.status_code)
        return ctx.render(request, "error.html", "", status=exc.status_code,
                          status_code=exc.status_code, detail=exc.detail, live=False)

    return error


def routes(ctx: Context) -> list[BaseRoute]:
    # The HTTP API: its own tokens and JSON answers (all 404 when no token is set).
    found: list[BaseRoute] = [Mount(api.PREFIX, api.build(Operations(ctx.app, source="http"),
                                                          ctx.settings))]
    found += [route for group in PAGE_GROUPS for route in group.routes(ctx)]
    found.append(Mount("/static", StaticFiles(packages=[("conveyor.web", "static")]),
                       name="static"))
    return found


def build(app: Conveyor, settings: Settings) -> Starlette:
    ctx = Context(Operations(app, source=settings.source), settings)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:  # the connections this server's loop opened
            await app.close_async()

    return Starlette(
        routes=routes(ctx),
        middleware=[Middleware(Guard, settings=settings)],
        exception_handlers={HTTPException: error_page(ctx)},
        lifespan=lifespan,
    )
