"""The jobs list, one job's page, and the single-job actions (retry, cancel, discard,
delete; a running job is never deleted from here: cancel it first), and edit and retry.

There is deliberately no action that enqueues an arbitrary task: an edit gives a job of
a task new arguments, checked as an enqueue of that task checks them, and records them
with the arguments they replaced and who asked (docs/dashboard.md).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .._app.reads import jobs as reads
from .._errors import InvalidStateError, JobNotFoundError
from .._job import EXPIRED_ERROR
from ._context import Context
from ._query import PAGE_SIZES, STATE_CHOICES, JobQuery, positive_int
from ._security import action_form


def sentence(exc: Exception) -> str:
    """The app's refusal, as the page shows it ("Job 7 is running and cannot be ...")."""
    text = str(exc)
    return f"{text[:1].upper()}{text[1:]}."


DONE = {"retry": "retried", "cancel": "cancelled", "discard": "discarded", "delete": "deleted"}


async def jobs(ctx: Context, request: Request) -> Response:
    params = request.query_params
    query = JobQuery.parse(params)
    limit = positive_int(params.get("limit"), 50) or 50
    limit = limit if limit in PAGE_SIZES else 50
    page = await reads.jobs_page(
        ctx.ops, query.to_filter(), ctx.settings.redact, limit=limit,
        before=positive_int(params.get("before")), after=positive_int(params.get("after")),
        cap=ctx.settings.count_cap)
    return ctx.render(request, "jobs.html", "/jobs", page=page, query=query, limit=limit,
                      states=STATE_CHOICES, sizes=PAGE_SIZES, text_scan=reads.TEXT_SCAN,
                      expired_error=EXPIRED_ERROR)


async def job(ctx: Context, request: Request) -> Response:
    job_id = positive_int(request.path_params["job_id"])
    detail = await reads.job_detail(ctx.ops, job_id, ctx.settings.redact) if job_id else None
    if detail is None:
        raise HTTPException(404, f"no job with id {request.path_params['job_id']}")
    return ctx.render(request, "job.html", "/jobs", d=detail)


async def job_action(ctx: Context, request: Request) -> Response:
    await action_form(request, ctx.settings)
    action = request.path_params["action"]
    job_id = positive_int(request.path_params["job_id"])
    if job_id is None or action not in DONE:
        raise HTTPException(404)
    ctx.audit(request, f"job.{action}", job=job_id)
    act = {"retry": ctx.ops.retry_job, "cancel": ctx.ops.cancel_job,
           "discard": ctx.ops.discard_job, "delete": ctx.ops.delete_job}[action]
    try:
        await act(job_id)
    except JobNotFoundError:
        raise HTTPException(404, f"no job with id {job_id}") from None
    except InvalidStateError as exc:
        return ctx.redirect(request, f"/jobs/{job_id}", "error", sentence(exc))
    return ctx.redirect(request, "/jobs" if action == "delete" else f"/jobs/{job_id}",
                        DONE[action], job_id)


def _parsed(text: str, kind: type, name: str) -> Any:
    """A form field's JSON, of the kind asked for; None when left empty."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{name} is not JSON: {exc}") from None
    if not isinstance(value, kind):
        what = "an array" if kind is list else "an object"
        raise ValueError(f"{name} must be {what} in JSON, got {type(value).__name__}")
    return value


async def job_edit(ctx: Context, request: Request) -> Response:
    """Edit and retry: the new arguments, or the job page again with the error in place
    and the text as it was typed."""
    form = await action_form(request, ctx.settings)
    job_id = positive_int(request.path_params["job_id"])
    if job_id is None:
        raise HTTPException(404)
    ctx.audit(request, "job.edit_retry", job=job_id)
    typed = {"args": form.get("args", "").strip(), "kwargs": form.get("kwargs", "").strip()}
    try:
        args = _parsed(typed["args"], list, "args")
        kwargs = _parsed(typed["kwargs"], dict, "kwargs")
        if args is None and kwargs is None:
            raise ValueError("give the new args (a JSON array) or kwargs (a JSON object)")
        await ctx.ops.retry_job_edited(job_id, args, kwargs, ctx.user(request))
    except JobNotFoundError:
        raise HTTPException(404, f"no job with id {job_id}") from None
    except InvalidStateError as exc:
        return ctx.redirect(request, f"/jobs/{job_id}", "error", sentence(exc))
    except (TypeError, ValueError) as exc:
        detail = await reads.job_detail(ctx.ops, job_id, ctx.settings.redact)
        if detail is None:
            raise HTTPException(404, f"no job with id {job_id}") from None
        return ctx.render(request, "job.html", "/jobs", status=422, d=detail,
                          edit_error=sentence(exc), edit_typed=typed)
    return ctx.redirect(request, f"/jobs/{job_id}", "retried", job_id)


def routes(ctx: Context) -> list[Route]:
    return [Route("/jobs", ctx.bind(jobs)), Route("/jobs/{job_id}", ctx.bind(job)),
            Route("/jobs/{job_id}/edit", ctx.bind(job_edit), methods=["POST"]),
            Route("/jobs/{job_id}/{action}", ctx.bind(job_action), methods=["POST"])]
