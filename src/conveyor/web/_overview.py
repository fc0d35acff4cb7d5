"""The overview page, ``/healthz`` and ``/metrics``."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .. import __version__
from .._app import reads
from .._format import percent, seconds
from ._charts import Line, bars, lines
from ._context import Context
from ._exposition import CONTENT_TYPE, exposition


async def overview(ctx: Context, request: Request) -> Response:
    view = await reads.overview(ctx.ops)
    s = view.series
    charts = {
        "throughput": bars(s.minutes, [Line("completed", s.completed, "s-completed"),
                                       Line("failed", s.failed, "s-failed")],
                           "Jobs finished per minute"),
        "failure": lines(s.minutes, [Line("failure rate", s.failure_rate, "s-failed")],
                         "Failure rate per minute", percent),
        "latency": lines(s.minutes, [Line("p50", s.p50, "s-p50"), Line("p95", s.p95, "s-p95")],
                         "Enqueue-to-start latency", seconds),
        "depth": lines(s.minutes, [Line(name, s.depth[name], f"s-{name}")
                                   for name in ("available", "scheduled", "retryable",
                                                "running")], "Queue depth"),
    }
    return ctx.render(request, "overview.html", "/", view=view, charts=charts)


async def healthz(ctx: Context, request: Request) -> Response:
    """200 when the database answers and its schema is current, else 503."""
    health = await reads.health(ctx.ops, ctx.settings.timeout)
    if health.ok:
        body = {"status": "ok", "database": "ok", "schema": health.version}
    elif not health.reachable:
        body = {"status": "unhealthy", "database": "unreachable"}
    else:
        body = {"status": "unhealthy", "database": "ok",
                "schema": f"at {health.version}, expected {health.latest}"}
    return JSONResponse(body, status_code=200 if health.ok else 503)


def unhealthy(ctx: Context, request: Request, reason: str) -> Response:
    return JSONResponse({"status": "unhealthy", "database": "unreachable"}, status_code=503)


async def metrics(ctx: Context, request: Request) -> Response:
    """The same families as ``conveyor.contrib.prometheus.ConveyorCollector`` (one
    code path), read on the dashboard's event loop."""
    snapshot = await reads.read(ctx.ops)
    return Response(exposition(reads.families(snapshot, __version__)), media_type=CONTENT_TYPE)


def metrics_down(ctx: Context, request: Request, reason: str) -> Response:
    """Scrapers get an answer, not a hang: the database is down, as a gauge."""
    return Response(exposition(reads.families(None, __version__)), media_type=CONTENT_TYPE)


def routes(ctx: Context) -> list[Route]:
    return [Route("/", ctx.bind(overview)), Route("/healthz", ctx.bind(healthz, unhealthy)),
            Route("/metrics", ctx.bind(metrics, metrics_down))]
