"""The API's job handlers: enqueue (one or a bulk list), read, list, wait, cancel,
retry. Every change goes through the app as the dashboard's and the CLI's do (task
API, ``Operations`` with ``source="http"``: the state-change events say the HTTP API
acted, apart from the Python API's ``"api"``)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..._app import JobFilter, search
from ..._app.named import UnknownTaskError, task_by_name
from ..._errors import (
    InvalidStateError,
    JobNotFoundError,
    UnknownDependencyError,
    WaitTimeoutError,
)
from ..._job import Job, JobState
from ..._task import JobSpec
from ._http import ApiError, invalid, not_found
from ._schema import JOB_FIELDS, JobRequest, parse_job_request

if TYPE_CHECKING:
    from ._context import Api

#: Most jobs one bulk request enqueues (and never more than the app's ``max_batch``,
#: so a bulk request is one transaction: all of its jobs or none).
MAX_BULK = 1000
#: Jobs per page of ``GET /jobs`` (default, most).
PAGE, MAX_PAGE = 50, 500
#: Longest long poll of ``GET /jobs/{id}/wait`` (default, most), seconds.
WAIT, MAX_WAIT = 30.0, 60.0
_ARGUMENT = re.compile(r"argument:? '(\w+)'")


def job_json(api: Api, job: Job) -> dict[str, Any]:
    """A job as every answer shows it: redacted like the dashboard's pages."""
    return api.settings.redact(job).to_dict()


def _field_of(message: str, prefix: str) -> str:
    """The request field an app error is about (its messages name them)."""
    for field in JOB_FIELDS:
        if field.option and re.search(rf"\b{field.name}\b", message):
            return prefix + field.name
    if re.search(r"\btag\b", message):
        return prefix + "tags"
    return prefix + "args" if "argument" in message else prefix.rstrip(".") or "body"


def _spec(api: Api, request: JobRequest, prefix: str) -> JobSpec:
    """One job checked the way ``enqueue`` checks it, before anything is written."""
    try:
        task = task_by_name(api.app, request.task, known=bool(api.app.tasks))
    except UnknownTaskError as exc:
        raise ApiError(422, "unknown_task", str(exc), field=f"{prefix}task",
                       known=exc.known) from None
    except ValueError as exc:
        raise invalid(f"{prefix}task", str(exc)) from None
    try:
        with_options = task.options(**request.options)
    except (TypeError, ValueError) as exc:
        raise invalid(_field_of(str(exc), prefix), str(exc)) from None
    try:
        spec = with_options.job(*request.args, **request.kwargs)
    except TypeError as exc:  # the signature refuses them
        text = str(exc)
        found = _ARGUMENT.search(text)
        extra: dict[str, Any] = {"argument": found.group(1)} if found else {}
        field = "kwargs" if "keyword" in text or (found and request.kwargs) else "args"
        raise ApiError(422, "arguments", text, field=prefix + field, **extra) from None
    try:
        spec.to_insert(api.app.config.max_payload_bytes)  # encodes: sizes, names, ranges
    except (TypeError, ValueError) as exc:
        raise invalid(_field_of(str(exc), prefix), str(exc)) from None
    return spec


async def enqueue(api: Api, request: Request, params: dict[str, Any]) -> Response:
    body = params["body"]
    bulk = isinstance(body, list)
    docs = body if bulk else [body]
    most = min(MAX_BULK, api.app.config.max_batch)
    if bulk and not 1 <= len(docs) <= most:
        raise invalid("body", f"a bulk request has 1 to {most} jobs, got {len(docs)}")
    prefixes = [f"[{i}]." if bulk else "" for i in range(len(docs))]
    specs = [_spec(api, parse_job_request(doc, p), p) for doc, p in zip(docs, prefixes,
                                                                          strict=True)]
    try:
        jobs = await api.app.enqueue_many_async(specs)
    except UnknownDependencyError as exc:
        raise invalid("depends_on", str(exc), ids=exc.ids) from None
    except (TypeError, ValueError) as exc:
        raise invalid(_field_of(str(exc), ""), str(exc)) from None
    api.audit(request, "job.enqueue", jobs=[j.id for j in jobs][:20], count=len(jobs))
    out = [job_json(api, job) for job in jobs]
    return JSONResponse(out if bulk else out[0], 201)


async def get_job(api: Api, request: Request, params: dict[str, Any]) -> Response:
    job = await api.ops.get_job(params["job_id"])
    if job is None:
        raise not_found(params["job_id"])
    return JSONResponse(job_json(api, job))


async def list_jobs(api: Api, request: Request, params: dict[str, Any]) -> Response:
    """A page of jobs, newest first. By tag or argument, each request reads one window
    of ``search.SCAN`` ids below ``before_id`` (``scanned``); ``next`` goes on below the
    page, or below the window when it ended first, so paging reaches every match."""
    flt = JobFilter(states=(JobState(params["state"]),) if params["state"] else (),
                    queue=params["queue"], task=params["task"], tag=params["tag"],
                    args_contains=params["arg"])
    page = await api.ops.search_page(flt, params["limit"], params["before_id"], search.SCAN)
    cursor, link = page.next_before_id, None
    if cursor is not None:  # the same filters, older jobs
        query = {k: v for k, v in request.query_params.items() if k != "before_id"}
        link = f"{request.url.path}?{urlencode({**query, 'before_id': cursor})}"
    scanned = (None if page.scanned_from is None else
               {"from_id": page.scanned_from, "to_id": page.scanned_to})
    return JSONResponse({"jobs": [job_json(api, j) for j in page.jobs],
                         "next_before_id": cursor, "next": link, "scanned": scanned})


def read_arg(text: str) -> str:
    """``arg=NAME=VALUE``, as the dashboard's search box reads it: the filter as JSON."""
    return search.check_args_contains(search.args_from_pairs([text]))


async def wait_job(api: Api, request: Request, params: dict[str, Any]) -> Response:
    job_id, timeout = params["job_id"], params["timeout"]
    try:
        await api.app.wait_jobs_async([job_id], timeout, raise_failed=False)
    except JobNotFoundError:
        raise not_found(job_id) from None
    except WaitTimeoutError:
        now = await api.ops.get_job(job_id)
        raise ApiError(408, "timeout", f"job {job_id} is not final after {timeout:g} s",
                       job=job_json(api, now) if now else None) from None
    # Read again as stored: the wait decodes results as Python values for Python callers.
    job = await api.ops.get_job(job_id)
    if job is None:
        raise not_found(job_id)
    return JSONResponse(job_json(api, job))


async def job_action(api: Api, request: Request, params: dict[str, Any]) -> Response:
    action = request.url.path.rstrip("/").rsplit("/", 1)[1]
    act = {"cancel": api.ops.cancel_job, "retry": api.ops.retry_job}[action]
    job_id = params["job_id"]
    api.audit(request, f"job.{action}", job=job_id)
    try:
        job = await act(job_id)
    except JobNotFoundError:
        raise not_found(job_id) from None
    except InvalidStateError as exc:
        state = exc.job.state.value if exc.job is not None else None
        raise ApiError(409, "invalid_state", str(exc), state=state) from None
    return JSONResponse(job_json(api, job))
