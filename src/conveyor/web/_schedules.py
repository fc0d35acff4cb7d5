"""The schedules page and its actions: pause, resume, trigger now."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .._app import ScheduleNotFoundError, reads
from .._job import Job
from ._context import Context
from ._security import action_form


async def schedules(ctx: Context, request: Request) -> Response:
    return ctx.render(request, "schedules.html", "/schedules",
                      schedules=await reads.schedules(ctx.ops))


async def schedule_action(ctx: Context, request: Request) -> Response:
    await action_form(request, ctx.settings)
    name, action = request.path_params["name"], request.path_params["action"]
    ctx.audit(request, f"schedule.{action}", schedule=name)
    calls: dict[str, Callable[[str], Awaitable[object]]] = {
        "pause": ctx.app.pause_schedule_async, "resume": ctx.app.resume_schedule_async,
        "trigger": ctx.ops.trigger_schedule,
    }
    if action not in calls:
        raise HTTPException(404)
    try:
        result = await calls[action](name)
    except (ScheduleNotFoundError, ValueError) as exc:
        return ctx.redirect(request, "/schedules", "error", str(exc))
    if isinstance(result, Job):
        return ctx.redirect(request, "/schedules", "triggered", result.id)
    return ctx.redirect(request, "/schedules", f"schedule-{action}d", name)


def routes(ctx: Context) -> list[Route]:
    return [Route("/schedules", ctx.bind(schedules)),
            Route("/schedules/{name}/{action}", ctx.bind(schedule_action), methods=["POST"])]
