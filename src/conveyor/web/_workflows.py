"""The workflow page (its jobs drawn with their dependencies, a table, "cancel
workflow") and the batch page (counts, callbacks, members), with retry and cancel on
their jobs. An action on a member comes back to the page it was clicked on.

The core lists no workflows (a list would need a scan of every job with a workflow),
so there is no list page: a workflow is reached from its jobs' pages.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .._app.reads import composition as _composition
from .._errors import InvalidStateError, JobNotFoundError
from .._job import Job, JobState
from ._context import Context
from ._graph import DETAIL_LIMIT, layout
from ._jobs import sentence
from ._query import positive_int
from ._security import action_form

#: What ``enqueue_workflow`` writes (a UUID) and anything of the same shape; anything
#: else is no workflow (never sent to the database).
WORKFLOW_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}")
STATES = [s.value for s in JobState]
DONE = {"retry": "retried", "cancel": "cancelled"}
#: Whether a job belongs to the page's workflow or batch.
Belongs = Callable[[Job], bool]


def _workflow_id(request: Request) -> str:
    raw = request.path_params["workflow_id"]
    if not WORKFLOW_ID.fullmatch(raw):
        raise HTTPException(404, f"no workflow with id {raw[:100]}")
    return str(raw)


def _batch_id(request: Request) -> int:
    batch_id = positive_int(request.path_params["batch_id"])
    if batch_id is None:
        raise HTTPException(404, f"no batch with id {request.path_params['batch_id'][:100]}")
    return batch_id


async def workflow(ctx: Context, request: Request) -> Response:
    workflow_id = _workflow_id(request)
    state = request.query_params.get("state", "")
    view = await _composition.workflow_view(
        ctx.ops, workflow_id, ctx.settings.redact, state=state if state in STATES else "",
        page=positive_int(request.query_params.get("page"), 1) or 1)
    if view is None:
        raise HTTPException(404, f"no workflow with id {workflow_id}")
    return ctx.render(request, "workflow.html", "/jobs", w=view,
                      graph=layout(view.jobs, view.edges), states=STATES,
                      detail_limit=DETAIL_LIMIT)


async def workflow_cancel(ctx: Context, request: Request) -> Response:
    await action_form(request, ctx.settings)
    workflow_id = _workflow_id(request)
    if await ctx.ops.get_workflow(workflow_id) is None:
        raise HTTPException(404, f"no workflow with id {workflow_id}")
    ctx.audit(request, "workflow.cancel", workflow=workflow_id)
    changed = await ctx.ops.cancel_workflow(workflow_id)
    return ctx.redirect(request, f"/workflows/{workflow_id}", "workflow-cancelled", changed)


async def workflow_job_action(ctx: Context, request: Request) -> Response:
    await action_form(request, ctx.settings)
    workflow_id = _workflow_id(request)
    return await _member_action(ctx, request, f"/workflows/{workflow_id}",
                                lambda job: job.workflow_id == workflow_id)


async def batch(ctx: Context, request: Request) -> Response:
    batch_id = _batch_id(request)
    after = positive_int(request.query_params.get("after"), 0) or 0
    view = await _composition.batch_view(ctx.ops, batch_id, ctx.settings.redact, after=after)
    if view is None:
        raise HTTPException(404, f"no batch with id {batch_id}")
    return ctx.render(request, "batch.html", "/jobs", b=view)


async def batch_job_action(ctx: Context, request: Request) -> Response:
    await action_form(request, ctx.settings)
    batch_id = _batch_id(request)
    found = await ctx.ops.get_batch(batch_id)
    if found is None:
        raise HTTPException(404, f"no batch with id {batch_id}")
    callbacks = {found.on_success, found.on_complete, found.on_discard} - {None}
    return await _member_action(ctx, request, f"/batches/{batch_id}",
                                lambda job: job.batch_id == batch_id or job.id in callbacks)


async def _member_action(ctx: Context, request: Request, page: str,
                         belongs: Belongs) -> Response:
    """Retry or cancel one job of the page's workflow or batch, then back to the page."""
    action = request.path_params["action"]
    job_id = positive_int(request.path_params["job_id"])
    if job_id is None or action not in DONE:
        raise HTTPException(404)
    job = await ctx.ops.get_job(job_id)
    if job is None or not belongs(job):
        raise HTTPException(404, f"no job with id {job_id} in {page.lstrip('/')}")
    ctx.audit(request, f"job.{action}", job=job_id, page=page)
    act = ctx.ops.retry_job if action == "retry" else ctx.ops.cancel_job
    try:
        await act(job_id)
    except JobNotFoundError:
        raise HTTPException(404, f"no job with id {job_id}") from None
    except InvalidStateError as exc:
        return ctx.redirect(request, page, "error", sentence(exc))
    return ctx.redirect(request, page, DONE[action], job_id)


def routes(ctx: Context) -> list[Route]:
    return [
        Route("/workflows/{workflow_id}", ctx.bind(workflow)),
        Route("/workflows/{workflow_id}/cancel", ctx.bind(workflow_cancel), methods=["POST"]),
        Route("/workflows/{workflow_id}/jobs/{job_id}/{action}", ctx.bind(workflow_job_action),
              methods=["POST"]),
        Route("/batches/{batch_id}", ctx.bind(batch)),
        Route("/batches/{batch_id}/jobs/{job_id}/{action}", ctx.bind(batch_job_action),
              methods=["POST"]),
    ]

