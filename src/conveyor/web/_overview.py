"""The overview page, a queue's and a task's charts, ``/healthz`` and ``/metrics``.

Every chart page takes ``?range=1h|24h|7d`` (default 1h); any other value is a 400
naming the valid ones, so a mistyped link says so instead of showing another range."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .. import __version__
from .._app import reads
from ._charts import chart_set
from ._context import Context
from ._exposition import CONTENT_TYPE, exposition


def chart_range(request: Request) -> reads.Range:
    """``?range=``: one of ``reads.RANGES``, else 400."""
    name = request.query_params.get("range") or reads.DEFAULT_RANGE.name
    rng = reads.RANGES.get(name)
    if rng is None:
        raise HTTPException(400, f"range must be one of {', '.join(reads.RANGES)}")
    return rng


async def overview(ctx: Context, request: Request) -> Response:
    rng = chart_range(request)
    view = await reads.overview(ctx.ops, rng)
    return ctx.render(request, "overview.html", "/", view=view, rng=rng,
                      ranges=reads.RANGES, charts=chart_set(view.series, rng))


async def scope_charts(ctx: Context, request: Request) -> Response:
    """``/queues/{name}`` and ``/tasks/{name}``: that queue's or task's charts."""
    rng = chart_range(request)
    kind = "queue" if request.url.path.rstrip("/").split("/")[-2] == "queues" else "task"
    name = request.path_params["name"]
    if len(name) > 200 or not name.isprintable():
        raise HTTPException(404)
    series = await reads.series(ctx.ops, rng, queue=name if kind == "queue" else None,
                                task=name if kind == "task" else None)
    return ctx.render(request, "charts.html", "/queues" if kind == "queue" else "/jobs",
                      kind=kind, name=name, series=series, rng=rng, ranges=reads.RANGES,
                      charts=chart_set(series, rng, depth=kind == "queue"))


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
            Route("/metrics", ctx.bind(metrics, metrics_down)),
            Route("/queues/{name}", ctx.bind(scope_charts)),
            Route("/tasks/{name}", ctx.bind(scope_charts))]
