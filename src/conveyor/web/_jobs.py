"""The jobs list, one job's page, and the single-job actions (retry, cancel, discard,
delete; a running job is never deleted from here: cancel it first).

There is deliberately no action that enqueues an arbitrary task or edits arguments:
retry re-runs a job as it was written.
"""

from __future__ import annotations

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


def routes(ctx: Context) -> list[Route]:
    return [Route("/jobs", ctx.bind(jobs)), Route("/jobs/{job_id}", ctx.bind(job)),
            Route("/jobs/{job_id}/{action}", ctx.bind(job_action), methods=["POST"])]
