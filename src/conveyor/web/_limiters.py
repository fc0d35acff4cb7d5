"""The limiters page: every limiter (``app.limiter``) and its live holders."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ._context import Context


async def limiters(ctx: Context, request: Request) -> Response:
    return ctx.render(request, "limiters.html", "/limiters",
                      limiters=await ctx.app.list_limiters_async())


def routes(ctx: Context) -> list[Route]:
    return [Route("/limiters", ctx.bind(limiters))]
