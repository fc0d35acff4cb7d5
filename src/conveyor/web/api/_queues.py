"""The API's queue handlers: the queues as the dashboard's page shows them, pause and
resume (the app's own methods, as the dashboard and ``conveyor queues`` call them)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..._app import reads

if TYPE_CHECKING:
    from ._context import Api


async def list_queues(api: Api, request: Request, params: dict[str, Any]) -> Response:
    return JSONResponse([dataclasses.asdict(q) for q in await reads.queues(api.ops)])


async def queue_action(api: Api, request: Request, params: dict[str, Any]) -> Response:
    name = params["name"]
    pause = request.url.path.rstrip("/").endswith("/pause")
    api.audit(request, "queue.pause" if pause else "queue.resume", queue=name)
    if pause:
        await api.app.pause_queue_async(name)
    else:
        await api.app.resume_queue_async(name)
    return JSONResponse({"name": name, "paused": pause})
