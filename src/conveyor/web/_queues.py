"""The queues page and its actions: pause, resume, concurrency."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .._app import reads
from ._context import Context
from ._query import positive_int
from ._security import action_form, form_text

#: The most a queue's concurrency form accepts (as its input's ``max`` says).
MAX_CONCURRENCY = 100_000


async def queues(ctx: Context, request: Request) -> Response:
    return ctx.render(request, "queues.html", "/queues", queues=await reads.queues(ctx.ops))


async def queue_action(ctx: Context, request: Request) -> Response:
    form = await action_form(request, ctx.settings)
    name, action = request.path_params["name"], request.path_params["action"]
    ctx.audit(request, f"queue.{action}", queue=name)
    app = ctx.app
    try:
        if action == "pause":
            await app.pause_queue_async(name)
        elif action == "resume":
            await app.resume_queue_async(name)
        elif action == "concurrency":
            raw = form_text(form, "concurrency")
            limit = positive_int(raw) if raw else None
            if raw and (limit is None or limit > MAX_CONCURRENCY):
                return ctx.redirect(request, "/queues", "error",
                                    f"Concurrency must be a whole number from 1 to "
                                    f"{MAX_CONCURRENCY:,}.")
            await app.set_queue_concurrency_async(
                name, limit, per_node=form_text(form, "scope") == "per_node")
        else:
            raise HTTPException(404)
    except ValueError as exc:
        return ctx.redirect(request, "/queues", "error", str(exc))
    done = {"pause": "paused", "resume": "resumed", "concurrency": "concurrency"}[action]
    return ctx.redirect(request, "/queues", done, name)


def routes(ctx: Context) -> list[Route]:
    return [Route("/queues", ctx.bind(queues)),
            Route("/queues/{name}/{action}", ctx.bind(queue_action), methods=["POST"])]
