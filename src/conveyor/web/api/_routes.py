"""The API's one table of routes (``ENDPOINTS``): each names its method, path,
parameters, body and answers. The Starlette routes are built from it, every request is
read with its definitions, and ``/openapi.json`` is generated from it."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ... import _payload
from ..._app.operations import Operations
from ..._app.reads.overview import QueueView
from ..._errors import DatabaseUnavailableError, SchemaError
from ..._job import Job, JobState
from .._settings import Settings
from . import _jobs, _queues
from ._context import Api, Handler
from ._http import MAX_BODY, ApiError, read_json
from ._schema import (
    Param,
    bounded_int,
    bounded_seconds,
    checked,
    job_request_schema,
    one_of,
    parameter_doc,
    positive,
    read_params,
    record_schema,
)

PREFIX = "/api/v1"

@dataclasses.dataclass(frozen=True, slots=True)
class Endpoint:
    method: str
    path: str
    handler: Handler
    summary: str
    ok: tuple[int, dict[str, Any]]
    write: bool = False
    params: tuple[Param, ...] = ()
    body: dict[str, Any] | None = None
    errors: tuple[int, ...] = ()
    #: Parameter whose seconds extend the request's deadline (a long poll).
    waits: str | None = None


async def openapi_doc(api: Api, request: Request, params: dict[str, Any]) -> Response:
    return JSONResponse(openapi(request.url.path.removesuffix("/openapi.json")))


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


JOB_ID = Param("job_id", "path", {"type": "integer", "minimum": 1}, "The job's id.", positive)
QUEUE = Param("name", "path", {"type": "string"}, "The queue's name.",
              checked(_payload.check_queue_name))
LIST = (
    Param("state", "query", {"type": "string", "enum": [s.value for s in JobState]},
          "Only jobs in this state.", one_of(tuple(s.value for s in JobState))),
    Param("queue", "query", {"type": "string"}, "Only jobs of this queue.",
          checked(_payload.check_queue_name)),
    Param("task", "query", {"type": "string"}, "Only jobs of this task.",
          checked(_payload.check_task_name)),
    Param("tag", "query", {"type": "string"}, "Only jobs with this tag.",
          checked(lambda t: _payload.check_tags([t])[0])),
    Param("limit", "query", {"type": "integer", "minimum": 1, "maximum": _jobs.MAX_PAGE},
          "Jobs per page.", bounded_int(1, _jobs.MAX_PAGE), _jobs.PAGE),
    Param("arg", "query", {"type": "string"},
          "Only jobs with this keyword argument, NAME=VALUE (VALUE as JSON when it parses, "
          "else text; a.b=V reaches into a dict), e.g. order_id=1234.", _jobs.read_arg),
    Param("before_id", "query", {"type": "integer", "minimum": 1},
          "Jobs older than this id (the previous page's next_before_id).", positive),
)
WAIT = Param("timeout", "query", {"type": "number", "minimum": 0, "maximum": _jobs.MAX_WAIT},
             "Seconds to wait for the job to be final.", bounded_seconds(_jobs.MAX_WAIT),
             _jobs.WAIT)
JOB_BODY = {"oneOf": [_ref("JobRequest"),
                      {"type": "array", "items": _ref("JobRequest"), "minItems": 1,
                       "maxItems": _jobs.MAX_BULK}]}
JOBS_ANSWER = {"oneOf": [_ref("Job"), {"type": "array", "items": _ref("Job")}]}
PAGE_ANSWER = {"type": "object", "required": ["jobs", "next_before_id", "next", "scanned"],
               "properties": {
    "jobs": {"type": "array", "items": _ref("Job")},
    "next_before_id": {"type": ["integer", "null"], "description": (
        "The next page's before_id: below this page's last job when the page is full, "
        "else below the scanned window (a page may be empty while older jobs remain); "
        "null when nothing older is left.")},
    "next": {"type": ["string", "null"], "description": "The next page's path and query."},
    "scanned": {"type": ["object", "null"], "description": (
        "A search by tag or arg cannot use an index: each request reads one window of "
        "at most 100,000 job ids, these (null: no window, an index served the filter). "
        "Follow next to search the next window down."),
        "required": ["from_id", "to_id"], "properties": {
            "from_id": {"type": "integer"}, "to_id": {"type": "integer"}}}}}
PAUSED = {"type": "object", "required": ["name", "paused"],
          "properties": {"name": {"type": "string"}, "paused": {"type": "boolean"}}}
DOC = {"type": "object", "description": "This document (OpenAPI 3.1)."}

ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("POST", "/jobs", _jobs.enqueue, "Enqueue a job, or a list of jobs at once "
             "(one transaction: all or none).", (201, JOBS_ANSWER), write=True,
             body=JOB_BODY, errors=(400, 413, 415, 422)),
    Endpoint("GET", "/jobs", _jobs.list_jobs, "Jobs, newest first, one page (by tag or "
             "arg: one window of ids per request, see scanned and next).",
             (200, PAGE_ANSWER), params=LIST, errors=(400,)),
    Endpoint("GET", "/jobs/{job_id}", _jobs.get_job, "One job.", (200, _ref("Job")),
             params=(JOB_ID,), errors=(400, 404)),
    Endpoint("GET", "/jobs/{job_id}/wait", _jobs.wait_job,
             "The job once it is final (long poll); 408 when it is not within timeout.",
             (200, _ref("Job")), params=(JOB_ID, WAIT), errors=(400, 404, 408),
             waits="timeout"),
    Endpoint("POST", "/jobs/{job_id}/cancel", _jobs.job_action,
             "Cancel a job (a running one is stopped by its worker).", (200, _ref("Job")),
             write=True, params=(JOB_ID,), errors=(400, 404, 409)),
    Endpoint("POST", "/jobs/{job_id}/retry", _jobs.job_action,
             "Run a job again now, with one more attempt.", (200, _ref("Job")), write=True,
             params=(JOB_ID,), errors=(400, 404, 409)),
    Endpoint("GET", "/queues", _queues.list_queues, "Every queue, with its counts.",
             (200, {"type": "array", "items": _ref("Queue")})),
    Endpoint("POST", "/queues/{name}/pause", _queues.queue_action,
             "Stop workers from starting jobs of the queue.", (200, PAUSED), write=True,
             params=(QUEUE,), errors=(400,)),
    Endpoint("POST", "/queues/{name}/resume", _queues.queue_action, "Resume the queue.",
             (200, PAUSED), write=True, params=(QUEUE,), errors=(400,)),
    Endpoint("GET", "/openapi.json", openapi_doc, "This API's OpenAPI 3.1 document.",
             (200, DOC)),
)

ERROR = {"type": "object", "required": ["error", "message"], "properties": {
    "error": {"type": "string", "description": "A stable code (unauthorized, invalid, ...)."},
    "message": {"type": "string"},
    "field": {"type": "string", "description": "The request field or parameter at fault."},
}}
ERRORS = {400: "Bad JSON or a bad parameter.", 401: "No valid bearer token.",
          403: "A read-only token (or dashboard) and a change.", 404: "No such job.",
          408: "Not final within the timeout (the job as it is, under job).",
          409: "The job's state does not allow it.", 413: f"Body over {MAX_BODY} bytes.",
          415: "Not application/json.", 421: "Host not served (DNS rebinding).",
          422: "A field that cannot be used (its name under field).",
          503: "The database is unreachable."}
COMMON = (401, 421, 503)


def _operation(ep: Endpoint) -> dict[str, Any]:
    status, schema = ep.ok
    responses: dict[str, Any] = {str(status): {"description": "OK", "content": {
        "application/json": {"schema": schema}}}}
    for code in sorted({*ep.errors, *COMMON, *((403,) if ep.write else ())}):
        responses[str(code)] = {"description": ERRORS[code], "content": {
            "application/json": {"schema": _ref("Error")}}}
    slug = re.sub(r"[^a-z0-9]+", "_", ep.path.lower()).strip("_")  # post_jobs_job_id_cancel
    op: dict[str, Any] = {"summary": ep.summary, "operationId": f"{ep.method.lower()}_{slug}",
                          "parameters": [parameter_doc(p) for p in ep.params],
                          "responses": responses}
    if ep.body is not None:
        op["requestBody"] = {"required": True,
                             "content": {"application/json": {"schema": ep.body}}}
    return op


def openapi(server: str = PREFIX) -> dict[str, Any]:
    """The API's OpenAPI 3.1 document, from ``ENDPOINTS`` and the answers' dataclasses."""
    from ... import __version__

    paths: dict[str, dict[str, Any]] = {}
    for ep in ENDPOINTS:
        paths.setdefault(ep.path, {})[ep.method.lower()] = _operation(ep)
    return {
        "openapi": "3.1.0",
        "info": {"title": "Conveyor HTTP API", "version": __version__,
                 "description": "Enqueue and manage Conveyor jobs. See docs/http-api.md."},
        "servers": [{"url": server or "/"}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Job": record_schema(Job), "Queue": record_schema(QueueView),
                        "JobRequest": job_request_schema(), "Error": ERROR},
        },
    }


def bind(api: Api, ep: Endpoint) -> Callable[[Request], Awaitable[Response]]:
    """``ep`` as a Starlette endpoint: token, parameters, body, then the handler within
    the dashboard's database deadline (plus the long poll's own time); a database that
    is down or late answers 503 at once."""

    async def endpoint(request: Request) -> Response:
        try:
            await api.authorize(request, ep.write)
            params = read_params(ep.params, request.query_params, request.path_params)
            if ep.body is not None:  # read before the deadline: a slow client is no outage
                params["body"] = await read_json(request)
            limit = api.settings.timeout + (params[ep.waits] if ep.waits else 0)
            try:
                async with asyncio.timeout(limit):
                    return await ep.handler(api, request, params)
            except TimeoutError:
                reason = f"it did not answer within {limit:g} s"
            except (DatabaseUnavailableError, SchemaError) as exc:
                reason = " ".join(str(exc).split())[:300]
        except ApiError as exc:
            return exc.response()
        Api.log.warning("api %s %s: database unreachable: %s", request.method, request.url.path,
                    reason)
        return ApiError(503, "database_unreachable", f"the database is unreachable: {reason}",
                        headers={"retry-after": "5"}).response()

    endpoint.__name__ = ep.handler.__name__
    return endpoint


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "error")
    return ApiError(exc.status_code, code, str(exc.detail), headers=exc.headers).response()


async def _disabled(request: Request) -> Response:
    return ApiError(404, "api_disabled", "the HTTP API is off: set CONVEYOR_API_TOKEN "
                    "(or create_app(..., api_tokens=...))").response()


def build(ops: Operations, settings: Settings) -> Starlette:
    """The API as an ASGI app to mount at ``/api/v1``; all 404 without tokens."""
    if not settings.api_tokens:
        return Starlette(routes=[Route("/{rest:path}", _disabled, methods=[
            "GET", "POST", "PUT", "PATCH", "DELETE"])])
    api = Api(ops, settings)
    return Starlette(
        routes=[Route(ep.path, bind(api, ep), methods=[ep.method]) for ep in ENDPOINTS],
        exception_handlers={HTTPException: _http_error},
    )
