"""Assembling the dashboard: routes, static files, the gate and error pages."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ._actions import Actions
from ._pages import Pages
from ._security import Guard
from ._settings import Settings

if TYPE_CHECKING:
    from .._app import Conveyor


class Dashboard(Pages, Actions):
    """Every page and action of one dashboard, bound to one app."""

    async def error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if "state" not in request.scope or "csrf_nonce" not in request.scope["state"]:
            return PlainTextResponse(exc.detail, exc.status_code)
        return self.render(request, "error.html", "", status=exc.status_code,
                           status_code=exc.status_code, detail=exc.detail, live=False)

    def routes(self) -> list[Route | Mount]:
        post = ["POST"]
        return [
            Route("/", self.overview),
            Route("/queues", self.queues),
            Route("/queues/{name}/{action}", self.queue_action, methods=post),
            Route("/jobs", self.jobs),
            Route("/jobs/{job_id}", self.job),
            Route("/jobs/{job_id}/{action}", self.job_action, methods=post),
            Route("/failures", self.failures),
            Route("/bulk", self.bulk),
            Route("/bulk", self.bulk_action, methods=post),
            Route("/schedules", self.schedules),
            Route("/schedules/{name}/{action}", self.schedule_action, methods=post),
            Route("/workers", self.workers),
            Route("/healthz", self.healthz),
            Route("/metrics", self.metrics),
            Mount("/static", StaticFiles(packages=[("conveyor.web", "static")]), name="static"),
        ]


def build(app: Conveyor, settings: Settings) -> Starlette:
    dashboard = Dashboard(app, settings)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:  # the connections this server's loop opened
            await app.close_async()

    return Starlette(
        routes=dashboard.routes(),
        middleware=[Middleware(Guard, settings=settings)],
        exception_handlers={HTTPException: dashboard.error},
        lifespan=lifespan,
    )
