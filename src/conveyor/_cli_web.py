"""The CLI's observability commands: `dashboard`, `check` (a liveness probe) and
`status` (a terminal overview)."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from . import cli as root
from ._app import Conveyor
from ._operations import Operations
from ._cli_jobs import STATE_STYLES, console, print_json
from ._cli_worker import open_app
from .web import _data
from .web._format import count, number, percent, seconds
from .web._settings import ENV_PASSWORD, ENV_TOKEN, ENV_USER, auth_from_env, is_loopback

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
    from . import web

    app = open_app(app_path, url)
    root.run_async(app, lambda: _startup(app))
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


# -- check --------------------------------------------------------------------------------


async def _check(app: Conveyor, min_workers: int) -> tuple[bool, dict[str, Any]]:
    health = await _data.health(Operations(app, source="cli"))
    doc: dict[str, Any] = {"database": "ok" if health.reachable else "unreachable",
                           "schema": health.version, "expected_schema": health.latest}
    if not health.reachable:
        doc["error"] = health.error
        return False, doc
    ok = health.ok
    if ok and min_workers:
        alive = sum(1 for n in await app.list_nodes_async() if n.alive)
        doc["workers"] = alive
        ok = alive >= min_workers
    return ok, doc


def check(app_path: str | None, url: str | None, min_workers: int, as_json: bool) -> None:
    try:
        app = open_app(app_path, url)
        ok, doc = root.run_async(app, lambda: _check(app, min_workers))
    except click.UsageError:
        raise
    except Exception as exc:  # any failure is "not healthy" for a probe
        ok, doc = False, {"error": " ".join(f"{type(exc).__name__}: {exc}".split())}
    doc["status"] = "ok" if ok else "unhealthy"
    if as_json:
        click.echo(json.dumps(doc))
    else:
        parts = [f"{k}={v}" for k, v in doc.items() if k != "status" and v is not None]
        click.echo(f"{doc['status']}: {' '.join(parts)}", err=not ok)
    sys.exit(0 if ok else 1)


# -- status -------------------------------------------------------------------------------


async def _status(app: Conveyor) -> tuple[_data.Overview, list[_data.NodeView]]:
    ops = Operations(app, source="cli")
    return await _data.overview(ops), await _data.workers(ops)


def _tables(view: _data.Overview, nodes: list[_data.NodeView]) -> Group:
    states = Text("Jobs  ", style="bold")
    for name, pair in view.states.items():
        states.append(f"{name} ", style=STATE_STYLES.get(name, ""))
        states.append(f"{count(*pair)}   ", style="bold")
    s = view.series
    hour = Text("Last hour  ", style="bold")
    hour.append(f"completed {number(s.hour_completed)} · failed {number(s.hour_failed)} "
                f"({percent(s.hour_failure_rate)}) · {number(s.per_minute)}/min · latency "
                f"p50 {seconds(s.hour_p50)} p95 {seconds(s.hour_p95)}")
    queues = Table(box=box.SIMPLE_HEAVY, title="Queues", title_justify="left")
    for header in ("queue", "", "avail", "sched", "retry", "run", "1h ok/fail", "limit"):
        queues.add_column(header, justify="left" if header in ("queue", "") else "right")
    for q in view.queues:
        limit = str(q.concurrency) if q.concurrency else f"{q.worker_limit or '-'}*"
        queues.add_row(Text(q.name), Text("paused", style="red") if q.paused else Text(""),
                       *(number(q.counts[k]) for k in ("available", "scheduled", "retryable",
                                                       "running")),
                       f"{number(q.hour_completed)}/{number(q.hour_failed)}", limit)
    parts: list[Any] = [states, hour, queues]
    if nodes:
        workers = Table(box=box.SIMPLE_HEAVY, title="Workers", title_justify="left")
        for header in ("node", "host", "pid", "queues", "run", "heartbeat", "role"):
            workers.add_column(header)
        for n in nodes:
            workers.add_row(Text(n.id[:8]), Text(n.hostname), str(n.pid),
                            Text(",".join(f"{k}:{v}" for k, v in n.queues.items())),
                            str(n.running), Text(f"{seconds(n.heartbeat_age)} ago",
                                                 style="" if n.alive else "red"),
                            "leader" if n.leader else "")
        parts.append(workers)
    else:
        parts.append(Text("No live workers.", style="yellow"))
    if view.queues:
        parts.append(Text("* no queue limit set: the sum of the workers' -c", style="dim"))
    return Group(*parts)


def status(app_path: str | None, url: str | None, as_json: bool) -> None:
    app = open_app(app_path, url)
    view, nodes = root.run_async(app, lambda: _status(app))
    if as_json:
        s = view.series
        print_json({
            "states": {k: {"count": n, "capped": c} for k, (n, c) in view.states.items()},
            "last_hour": {"completed": s.hour_completed, "failed": s.hour_failed,
                          "failure_rate": s.hour_failure_rate, "latency_p50": s.hour_p50,
                          "latency_p95": s.hour_p95},
            "queues": [{"name": q.name, "paused": q.paused, "counts": q.counts,
                        "concurrency": q.concurrency} for q in view.queues],
            "workers": [{"id": n.id, "hostname": n.hostname, "alive": n.alive,
                         "running": n.running, "leader": n.leader} for n in nodes],
        })
        return
    console().print(_tables(view, nodes))


# -- registration ---------------------------------------------------------------------------


def register(cli: click.Group) -> None:
    epilog = root.EPILOG

    @cli.command("dashboard", epilog=epilog)
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
    @root.common_options
    def dashboard_cmd(host: str, port: int, read_only: bool, poll: float, app_path: str | None,
                      url: str | None) -> None:
        """Serve the web dashboard (Mission Control), /healthz and /metrics.

        Authentication comes from the environment: CONVEYOR_DASHBOARD_TOKEN (bearer, or
        the password of basic auth), or CONVEYOR_DASHBOARD_USER and
        CONVEYOR_DASHBOARD_PASSWORD. CONVEYOR_DASHBOARD_SECRET signs CSRF tokens
        (give every replica the same one).
        """
        dashboard(app_path, url, host, port, read_only, poll)

    @cli.command("check", epilog=epilog)
    @click.option("--min-workers", type=click.IntRange(min=0), default=0, show_default=True,
                  help="Also require this many workers with a recent heartbeat.")
    @root.json_option
    @root.common_options
    def check_cmd(min_workers: int, as_json: bool, app_path: str | None,
                  url: str | None) -> None:
        """Liveness probe: exit 0 when the database answers and its schema is current
        (and enough workers are alive), else 1."""
        check(app_path, url, min_workers, as_json)

    @cli.command("status", epilog=epilog)
    @root.json_option
    @root.common_options
    def status_cmd(as_json: bool, app_path: str | None, url: str | None) -> None:
        """A terminal overview: jobs per state, the last hour, queues and workers."""
        status(app_path, url, as_json)


__all__ = ["refuse_open_bind", "register"]
