"""The API's answers and refusals: JSON everywhere, one error shape
(``{"error": code, "message": text, "field": name?}``), bodies read with a cap."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

#: Largest request body read (a bulk enqueue included); more is refused with 413.
MAX_BODY = 1024 * 1024


class ApiError(Exception):
    """A refusal, raised anywhere in a handler and answered as JSON."""

    def __init__(self, status: int, code: str, message: str, *, field: str | None = None,
                 headers: Mapping[str, str] | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.field, self.headers, self.extra = field, headers, extra

    def response(self) -> JSONResponse:
        body: dict[str, Any] = {"error": self.code, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        body.update(self.extra)
        return JSONResponse(body, self.status, headers=self.headers)


def invalid(field: str, message: str, **extra: Any) -> ApiError:
    """422: the body's ``field`` cannot be used."""
    return ApiError(422, "invalid", message, field=field, **extra)


def bad_parameter(name: str, message: str) -> ApiError:
    """400: a query parameter cannot be read."""
    return ApiError(400, "bad_parameter", f"{name}: {message}", field=name)


def not_found(job_id: object) -> ApiError:
    return ApiError(404, "not_found", f"no job with id {str(job_id)[:40]}")


async def read_json(request: Request, cap: int = MAX_BODY) -> Any:
    """The body as JSON; 413 past ``cap`` bytes (counted as they arrive, whatever
    Content-Length says), 415 for another content type, 400 for bad JSON."""
    kind = request.headers.get("content-type", "application/json").split(";")[0].strip()
    if kind.lower() != "application/json":
        raise ApiError(415, "unsupported_media_type", "send the body as application/json")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise _too_large(cap)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > cap:
            raise _too_large(cap)
    try:
        return json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise ApiError(400, "bad_json", "the body is not UTF-8") from None
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, "bad_json", f"the body is not valid JSON: {exc}"[:300]) from None


def _too_large(cap: int) -> ApiError:
    return ApiError(413, "too_large", f"the body is over {cap} bytes")
