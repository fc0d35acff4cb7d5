"""``conveyor dashboard``: serve the web dashboard (Mission Control), /healthz, /metrics."""

from __future__ import annotations

from typing import Any

import click

from .._app import Conveyor
from ..web._settings import ENV_PASSWORD, ENV_TOKEN, ENV_USER, auth_from_env, is_loopback
from ._base import EPILOG, common_options, run_async
from ._loading import open_app

DEFAULT_PORT = 8787


def refuse_open_bind(host: str, has_auth: bool) -> None:
    """Off loopback, the dashboard must ask who is there."""
    if not is_loopback(host) and not has_auth:
        raise click.UsageError(
            f"refusing to serve the dashboard on {host} without authentication: set "
            f"{ENV_TOKEN} (or {ENV_USER} and {ENV_PASSWORD}), or bind to 127.0.0.1"
        )


def _web_modules() -> Any:
    """uvicorn, after checking that the web extra is installed."""
    try:
        import jinja2  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn
    except ImportError as exc:
        raise click.UsageError(
            f"the dashboard needs the web extra ({exc.name} is missing): "
            "pip install 'conveyor[web]'") from None
    return uvicorn


async def _startup(app: Conveyor) -> None:
    """Open the database as every command does (exit 3 or 4 when it cannot be used)."""
    await app.storage()


def dashboard(app_path: str | None, url: str | None, host: str, port: int, read_only: bool,
              poll: float) -> None:
    try:
        auth = auth_from_env()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    refuse_open_bind(host, auth is not None)
    uvicorn = _web_modules()
    from .. import web

    app = open_app(app_path, url)
    run_async(app, lambda: _startup(app))
    secret = web.secret_from_env()
    asgi = web.create_app(app, auth=auth, read_only=read_only, poll_interval=poll,
                          secret=secret)
    shown = f"[{host}]" if ":" in host else host
    mode = ", read-only" if read_only else ""
    guard = ", authentication on" if auth is not None else ""
    click.echo(f"Conveyor dashboard on http://{shown}:{port}/ ({app.url.split('://')[0]}"
               f"{mode}{guard}); Ctrl-C stops it", err=True)
    uvicorn.run(asgi, host=host, port=port, log_level="warning", access_log=False,
                server_header=False)


@click.command("dashboard", epilog=EPILOG)
@click.option("--host", default="127.0.0.1", show_default=True,
              envvar="CONVEYOR_DASHBOARD_HOST",
              help="Address to listen on. Off loopback, authentication is required. "
              "Env: CONVEYOR_DASHBOARD_HOST.")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT,
              show_default=True, envvar="CONVEYOR_DASHBOARD_PORT",
              help="Env: CONVEYOR_DASHBOARD_PORT.")
@click.option("--read-only", is_flag=True, envvar="CONVEYOR_DASHBOARD_READ_ONLY",
              help="Show everything, change nothing. Env: CONVEYOR_DASHBOARD_READ_ONLY=1.")
@click.option("--poll", type=click.FloatRange(min=0), default=2.0, show_default=True,
              help="Seconds between live updates in the browser (0: off).")
@common_options
def dashboard_cmd(host: str, port: int, read_only: bool, poll: float, app_path: str | None,
                  url: str | None) -> None:
    """Serve the web dashboard (Mission Control), /healthz and /metrics.

    Authentication comes from the environment: CONVEYOR_DASHBOARD_TOKEN (bearer, or
    the password of basic auth), or CONVEYOR_DASHBOARD_USER and
    CONVEYOR_DASHBOARD_PASSWORD. CONVEYOR_DASHBOARD_SECRET signs CSRF tokens
    (give every replica the same one).
    """
    dashboard(app_path, url, host, port, read_only, poll)


__all__ = ["dashboard_cmd", "refuse_open_bind"]
