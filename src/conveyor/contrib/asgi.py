"""Conveyor inside a Starlette or FastAPI application: a lifespan that opens the app (and,
if asked, runs a worker beside the web server), and the dashboard mounted behind the host
application's own authentication.

Needs Starlette (``pip install 'conveyor[asgi]'`` or ``'conveyor[fastapi]'``)::

    from conveyor.contrib.asgi import conveyor_lifespan, mount_dashboard

    api = FastAPI(lifespan=conveyor_lifespan(app, worker=True, lifespan=my_lifespan))
    mount_dashboard(api, "/conveyor", app, authorize=is_staff)

See docs/fastapi.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from .._config import WorkerConfig
from ..web import Role, create_app, route_path

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from .._app import Conveyor

log = logging.getLogger("conveyor.contrib.asgi")

#: A Starlette/FastAPI lifespan: ``lifespan(host_app)`` is an async context manager.
Lifespan: TypeAlias = Callable[[Any], contextlib.AbstractAsyncContextManager[Any]]
#: ``authorize(request)``: True (may act), "read" (may look), False (403), a Response
#: (sent as is, e.g. a redirect to the login page); it may raise HTTPException (401...).
Authorize: TypeAlias = Callable[
    [Request], "bool | Role | Response | Awaitable[bool | Role | Response]"]
#: Where the role that ``authorize`` granted travels to the dashboard's own gate.
_ROLE_KEY = "conveyor.host_role"
_PUBLIC = ("/healthz",)


# -- lifespan ---------------------------------------------------------------------------------


def conveyor_lifespan(
    app: Conveyor, *, worker: bool | WorkerConfig = False,
    queues: Mapping[str, int] | None = None, lifespan: Lifespan | None = None,
) -> Lifespan:
    """A lifespan for ``Starlette(lifespan=...)`` / ``FastAPI(lifespan=...)``.

    At startup it opens ``app`` on the server's event loop (a database that is down or
    not migrated fails the startup, not the first request), then starts the in-process
    worker when ``worker`` is True or a ``WorkerConfig`` (``queues`` as in
    ``app.run_worker``), then enters the host's own ``lifespan`` (whose state it yields).
    At shutdown, in reverse: the host's lifespan exits, the worker stops taking jobs and
    gives running ones the config's ``shutdown_timeout`` to finish (then gives them back
    to the queue, as SIGTERM does), and every connection is closed (the sync API's too,
    which ``def`` handlers use; it reopens if called again).
    """
    if not isinstance(worker, bool | WorkerConfig):
        raise TypeError(f"worker= takes True, False or a WorkerConfig, not {worker!r}")
    config = worker if isinstance(worker, WorkerConfig) else WorkerConfig() if worker else None

    @contextlib.asynccontextmanager
    async def run(host: Any) -> AsyncIterator[Any]:
        await app.storage()
        runner = WorkerThread(app, queues, config) if config is not None else None
        try:
            if runner is not None:
                await runner.start()
            if lifespan is None:
                yield None
            else:
                async with lifespan(host) as state:
                    yield state
        finally:
            if runner is not None:
                await runner.stop()
            await app.close_async()
            await asyncio.to_thread(app.close)  # the sync API's loop (``def`` handlers)

    return run


class WorkerThread:
    """A worker on a thread and event loop of its own, beside the web server: handlers
    never hold up requests on the server's loop, and the server keeps its own signal
    handling (a worker installs SIGTERM/SIGINT handlers only on the main thread)."""

    def __init__(self, app: Conveyor, queues: Mapping[str, int] | None,
                 config: WorkerConfig) -> None:
        self.app, self.queues, self.config = app, queues, config
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="conveyor-worker", daemon=True)

    async def start(self) -> None:
        self._thread.start()
        await asyncio.to_thread(self._ready.wait)
        if self.error is not None:
            raise RuntimeError(f"the in-process Conveyor worker did not start: {self.error}")

    async def stop(self) -> None:
        """Ask for a graceful stop and wait for it: ``shutdown_timeout`` for running
        jobs, plus a margin for writing their outcomes."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # its loop already ended
                loop.call_soon_threadsafe(stop.set)
        wait = self.config.shutdown_timeout + 15
        await asyncio.to_thread(self._thread.join, wait)
        if self._thread.is_alive():
            log.error("the in-process worker still runs %.0fs after the shutdown began; "
                      "leaving it: its jobs come back when their leases expire", wait)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported, not raised on a thread nobody joins
            self.error = exc
            log.exception("the in-process Conveyor worker stopped with an error")
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        try:
            await self.app.storage()  # this loop's own connections; fails here if down
            self._ready.set()
            await self.app.run_worker(self.queues, config=self.config, stop=self._stop)
        finally:
            await self.app.close_async()


# -- the dashboard behind the host's authentication -------------------------------------------


def mount_dashboard(
    host: Starlette, path: str, app: Conveyor, *, authorize: Authorize,
    read_only: bool = False, allowed_hosts: Iterable[str] | None = None,
    name: str = "conveyor", **options: Any,
) -> ASGIApp:
    """Mount ``conveyor.web.create_app(app)`` at ``path`` of ``host`` (a Starlette or
    FastAPI app), every request first passing ``authorize(request)``, the host's own
    check (its session, its users, a FastAPI security scheme...).

    The dashboard's own defences stay on: the Host check (pass ``allowed_hosts``, the
    names your site answers to, as for ``create_app``), CSRF tokens and the Origin check on
    every action, read-only mode. ``options`` go to ``create_app`` (``secret=`` for
    several replicas, ``title=``, ...). Returns the mounted ASGI app.
    """
    if not callable(authorize):
        raise TypeError("authorize= takes a callable(request) -> bool | 'read' | Response")
    if not path.startswith("/") or path.endswith("/"):
        raise ValueError(f"mount path must start with '/' and not end with one: {path!r}")
    if "access" in options:
        raise TypeError("mount_dashboard takes authorize= instead of access=")
    dashboard = create_app(app, read_only=read_only, access=_granted_role,
                           allowed_hosts=allowed_hosts, **options)
    gated = HostAuth(dashboard, authorize)
    host.mount(path, gated, name=name)
    return gated


def _granted_role(request: Request) -> Role:
    """The dashboard's ``access`` hook: the role HostAuth granted (nothing else passes)."""
    role: Role = request.scope.get("state", {}).get(_ROLE_KEY, "deny")
    return role


class HostAuth:
    """ASGI middleware: ``authorize`` decides before the dashboard sees the request."""

    def __init__(self, app: ASGIApp, authorize: Authorize) -> None:
        self.app, self.authorize = app, authorize

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        state[_ROLE_KEY] = "deny"
        if route_path(scope) not in _PUBLIC:
            request = Request(scope, receive)
            try:
                answer = self.authorize(request)
                if inspect.isawaitable(answer):
                    answer = await answer
            except HTTPException as exc:  # e.g. FastAPI's HTTPBasic: 401 + WWW-Authenticate
                await PlainTextResponse(str(exc.detail), exc.status_code, headers=exc.headers)(
                    scope, receive, send)
                return
            if isinstance(answer, Response):
                await answer(scope, receive, send)
                return
            role = _role_of(answer)
            if role == "deny":
                await PlainTextResponse("forbidden", 403)(scope, receive, send)
                return
            state[_ROLE_KEY] = role
        await self.app(scope, receive, send)


def _role_of(answer: object) -> Role:
    if answer is True or answer == "write":
        return "write"
    if answer == "read":
        return "read"
    return "deny"  # False, None, anything unexpected: grants nothing
