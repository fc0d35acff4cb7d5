"""The workers page: every node, its queues, running jobs and heartbeat."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .._app import reads
from ._context import Context


async def workers(ctx: Context, request: Request) -> Response:
    return ctx.render(request, "workers.html", "/workers", nodes=await reads.workers(ctx.ops))


def routes(ctx: Context) -> list[Route]:
    return [Route("/workers", ctx.bind(workers))]
