"""What every API handler gets (``Api``), and the handlers' shape."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..._app.operations import Operations
from .._settings import Settings, api_role
from ._http import ApiError

#: A handler: the API, the request, its parameters as read (and ``body``, if it takes one).
Handler = Callable[["Api", Request, dict[str, Any]], Awaitable[Response]]


class Api:
    """What every handler gets: the app, its operations (acting as ``"http"``), the
    dashboard's settings."""

    log = logging.getLogger("conveyor.web")

    def __init__(self, ops: Operations, settings: Settings) -> None:
        self.ops, self.app, self.settings = ops, ops.app, settings

    async def authorize(self, request: Request, write: bool) -> None:
        """401 without a known bearer token (a wrong one after the dashboard's
        failure delay); 403 for a write with a read-only token or dashboard."""
        header = request.headers.get("authorization")
        role = api_role(self.settings.api_tokens, header)
        if role is None:
            if header and self.settings.auth_failure_delay > 0:
                await asyncio.sleep(self.settings.auth_failure_delay)  # slows guessing
            raise ApiError(401, "unauthorized", "send a valid token: Authorization: Bearer <token>",
                           headers={"www-authenticate": 'Bearer realm="Conveyor API"'})
        if write and (role != "write" or self.settings.read_only):
            why = "the dashboard is read-only" if self.settings.read_only else \
                "this token is read-only"
            raise ApiError(403, "forbidden", f"{why}: it may not change anything")

    def audit(self, request: Request, action: str, **fields: object) -> None:
        """Every change is logged, as the dashboard's actions are."""
        self.log.info("api action %s %s", action, fields, extra={"user": "api"})
