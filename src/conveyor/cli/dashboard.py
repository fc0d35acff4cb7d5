"""``conveyor dashboard``: serve the web dashboard (Mission Control), /healthz, /metrics."""

from __future__ import annotations

import errno
import os
import socket
from typing import Any

import click

from .._app import Conveyor
from ..web import (
    DEFAULT_SETTINGS,
    ENV_ALLOWED_HOSTS,
    ENV_PASSWORD,
    ENV_TOKEN,
    ENV_TRUSTED_ORIGINS,
    ENV_USER,
    LOOPBACK_HOSTS,
    auth_from_env,
    is_loopback,
    split_names,
)
from ._base import EPILOG, EXIT_USAGE, CliFailure, UsageFailure, common_options, run_async
from ._loading import open_app

DEFAULT_PORT = 8787


class ListenFailure(CliFailure):
    """The address cannot be listened on (in use, not ours): a configuration problem,
    so the usage exit code, not the database's."""

    exit_code = EXIT_USAGE


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, bound before anything else starts."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise ListenFailure(f"cannot listen on {host}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ListenFailure(f"port {port} on {host} is already in use: stop what listens "
                                "there or choose another --port") from None
        raise ListenFailure(f"cannot listen on {host} port {port}: {exc.strerror}") from None
    sock.set_inheritable(True)
    return sock


def served_hosts(host: str, given: tuple[str, ...]) -> tuple[str, ...]:
    """The Host names to serve: the configured ones and the bind address, so that the
    URL the command prints answers (``--host 127.0.0.2`` is loopback, yet not one of
    the names served by default). An address is no name a foreign site's DNS could
    point here, so serving it opens nothing to DNS rebinding."""
    names = list(given) or list(split_names(os.environ.get(ENV_ALLOWED_HOSTS)))
    bound = host.strip().strip("[]").lower()
    if bound and bound not in LOOPBACK_HOSTS and bound not in names:
        names.append(bound)
    return tuple(names)


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
        raise UsageFailure(  # one line, exit 2 (click's UsageError adds the usage)
            f"conveyor dashboard needs the web extra ({exc.name} is missing): "
            "pip install 'conveyor[web]'") from None
    return uvicorn


async def _startup(app: Conveyor) -> None:
    """Open the database as every command does (exit 3 or 4 when it cannot be used)."""
    await app.storage()


def dashboard(app_path: str | None, url: str | None, host: str, port: int, read_only: bool,
              poll: float, allowed: tuple[str, ...] = (), trusted: tuple[str, ...] = ()) -> None:
    try:
        auth = auth_from_env()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    refuse_open_bind(host, auth is not None)
    uvicorn = _web_modules()
    from .. import web

    app = open_app(app_path, url)
    sock = listen(host, port)
    try:
        run_async(app, lambda: _startup(app))
        secret = web.secret_from_env()
        origins = trusted or split_names(os.environ.get(ENV_TRUSTED_ORIGINS))
        try:
            asgi = web.create_app(app, auth=auth, read_only=read_only, poll_interval=poll,
                                  secret=secret, allowed_hosts=served_hosts(host, allowed),
                                  trusted_origins=origins)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        _serve(uvicorn, asgi, sock, host, port, app.url, read_only, auth is not None)
    finally:
        sock.close()


def _serve(uvicorn: Any, asgi: Any, sock: socket.socket, host: str, port: int, url: str,
           read_only: bool, has_auth: bool) -> None:
    port = sock.getsockname()[1] or port
    shown = f"[{host}]" if ":" in host else host
    mode = ", read-only" if read_only else ""
    guard = ", authentication on" if has_auth else ""
    click.echo(f"Conveyor dashboard on http://{shown}:{port}/ ({url.split('://')[0]}"
               f"{mode}{guard}); Ctrl-C stops it", err=True)
    config = uvicorn.Config(asgi, host=host, port=port, log_level="warning", access_log=False,
                            server_header=False)
    uvicorn.Server(config).run(sockets=[sock])


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
@click.option("--poll", type=click.FloatRange(min=0), default=DEFAULT_SETTINGS.poll_interval,
              show_default=True,
              help="Seconds between live updates in the browser (0: off).")
@click.option("--allowed-host", "allowed", multiple=True, metavar="NAME",
              help="A Host name to serve besides localhost, 127.0.0.1 and [::1] (repeat it; "
              "'*.example.com' for subdomains). Other Hosts get 421 (DNS rebinding). "
              f"Env: {ENV_ALLOWED_HOSTS} (comma-separated).")
@click.option("--trusted-origin", "trusted", multiple=True, metavar="ORIGIN",
              help="An origin such as https://ops.example.com whose actions are accepted "
              "behind a reverse proxy that rewrites Host (repeat it). "
              f"Env: {ENV_TRUSTED_ORIGINS}.")
@common_options
def dashboard_cmd(host: str, port: int, read_only: bool, poll: float, allowed: tuple[str, ...],
                  trusted: tuple[str, ...], app_path: str | None, url: str | None) -> None:
    """Serve the web dashboard (Mission Control), /healthz and /metrics.

    Authentication comes from the environment: CONVEYOR_DASHBOARD_TOKEN (bearer, or
    the password of basic auth), or CONVEYOR_DASHBOARD_USER and
    CONVEYOR_DASHBOARD_PASSWORD. CONVEYOR_DASHBOARD_SECRET signs CSRF tokens
    (give every replica the same one). Passwords and tokens need 16 characters.
    CONVEYOR_API_TOKEN (and CONVEYOR_API_READONLY_TOKEN) turn on the HTTP API under
    /api/v1/ (docs/http-api.md).

    Exits 2 when the address cannot be listened on (the port is in use), 3 when the
    database is unreachable. See docs/security.md.
    """
    dashboard(app_path, url, host, port, read_only, poll, allowed, trusted)


__all__ = ["dashboard_cmd", "refuse_open_bind"]
