"""Failures grouped by error, and the bulk actions (retry or discard every job
matching a filter, at most ``bulk_cap``) with their confirmation page."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .._app import reads
from .._errors import ConveyorError
from ._context import Context, safe_path
from ._query import JobQuery, positive_int
from ._security import action_form, form_text

BULK_ACTIONS = ("retry", "discard")


async def failures(ctx: Context, request: Request) -> Response:
    query = JobQuery.parse(request.query_params)
    groups = await reads.failure_groups(ctx.ops, query.queue or None, query.task or None,
                                        ctx.settings.redact)
    return ctx.render(request, "failures.html", "/failures", groups=groups, query=query,
                      JobQuery=JobQuery)


async def bulk(ctx: Context, request: Request) -> Response:
    """The confirmation page of a bulk action: what matches, how many, the cap."""
    action = request.query_params.get("action", "")
    if action not in BULK_ACTIONS:
        raise HTTPException(400, "action must be retry or discard")
    query = JobQuery.parse(request.query_params)
    cap = ctx.settings.bulk_cap
    before = positive_int(request.query_params.get("before"))  # the window the list showed
    flt = await reads.bounded(ctx.ops, query.to_filter(), before)
    preview = await reads.bulk_preview(ctx.ops, action, flt, cap, ctx.settings.redact)
    return ctx.render(request, "confirm.html", "/failures", action=action, query=query,
                      before=before if flt.max_id is not None else None,
                      count=min(preview.matching, cap), over=preview.over(cap), cap=cap,
                      per_state=[(s.value, n) for s, n in preview.per_state],
                      named=[s.value for s in flt.states], sample=preview.sample, live=False,
                      back=safe_path(request.query_params.get("back", "/failures")))


async def bulk_action(ctx: Context, request: Request) -> Response:
    """Retry or discard every job matching the filter, at most ``bulk_cap``."""
    form = await action_form(request, ctx.settings)
    action = form_text(form, "action")
    if action not in BULK_ACTIONS:
        raise HTTPException(400, "action must be retry or discard")
    query = JobQuery.parse(form)
    back = safe_path(form_text(form, "back", "/failures"))
    cap = ctx.settings.bulk_cap
    ctx.audit(request, f"bulk.{action}", filter=query.describe(), cap=cap)
    flt = await reads.bounded(ctx.ops, query.to_filter(), positive_int(form_text(form, "before")))
    act = ctx.ops.retry_matching if action == "retry" else ctx.ops.discard_matching
    try:
        changed = await act(flt, cap)
    except ConveyorError as exc:
        return ctx.redirect(request, back, "error", f"Bulk {action} failed: {exc}")
    return ctx.redirect(request, back, f"bulk-{action}", changed)


def routes(ctx: Context) -> list[Route]:
    return [Route("/failures", ctx.bind(failures)), Route("/bulk", ctx.bind(bulk)),
            Route("/bulk", ctx.bind(bulk_action), methods=["POST"])]
