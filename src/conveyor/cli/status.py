"""``conveyor check`` (a liveness probe) and ``conveyor status`` (a terminal overview),
both read through the operator reads the dashboard uses (``conveyor._app.reads``)."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from .._app import Conveyor, reads
from .._app.operations import Operations
from .._format import count, number, percent, seconds
from ._base import EPILOG, common_options, json_option, run_async
from ._loading import open_app
from ._render import STATE_STYLES, console, print_json

# -- check --------------------------------------------------------------------------------


async def _check(app: Conveyor, min_workers: int) -> tuple[bool, dict[str, Any]]:
    ops = Operations(app, source="cli")
    health = await reads.health(ops)
    doc: dict[str, Any] = {"database": "ok" if health.reachable else "unreachable",
                           "schema": health.version, "expected_schema": health.latest}
    if not health.reachable:
        doc["error"] = health.error
        return False, doc
    ok = health.ok
    if ok and min_workers:
        alive = len(await ops.alive_nodes())
        doc["workers"] = alive
        ok = alive >= min_workers
    return ok, doc


def check(app_path: str | None, url: str | None, min_workers: int, as_json: bool) -> None:
    try:
        app = open_app(app_path, url)
        ok, doc = run_async(app, lambda: _check(app, min_workers))
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


async def _status(app: Conveyor) -> tuple[reads.Overview, list[reads.NodeView]]:
    ops = Operations(app, source="cli")
    return await reads.overview(ops), await reads.workers(ops)


def _hour(view: reads.Overview) -> Text:
    """The last hour's figures, or what is known instead and why the rest is not."""
    s = view.series
    hour = Text("Last hour  ", style="bold")
    if view.metrics_missing is not None:
        known = ", ".join(f"{count(*pair)} {name}" for name, pair in view.finished.items())
        hour.append(f"unknown: {view.metrics_missing}. ", style="yellow")
        hour.append(f"All time, from the job table: {known}.")
        return hour
    hour.append(f"completed {number(s.hour_completed)} · failed {number(s.hour_failed)} "
                f"({percent(s.hour_failure_rate)}) · {number(s.per_minute)}/min · latency "
                f"p50 {seconds(s.hour_p50)} p95 {seconds(s.hour_p95)}")
    return hour


def _tables(view: reads.Overview, nodes: list[reads.NodeView]) -> Group:
    states = Text("Jobs  ", style="bold")
    for name, pair in view.states.items():
        states.append(f"{name} ", style=STATE_STYLES.get(name, ""))
        states.append(f"{count(*pair)}   ", style="bold")
    hour = _hour(view)
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
        for header in ("node", "host", "pid", "version", "labels", "queues", "run",
                       "heartbeat", "role"):
            workers.add_column(header)
        for n in nodes:
            workers.add_row(Text(n.id[:8]), Text(n.hostname), str(n.pid),
                            Text(n.version or "-"),
                            Text(",".join(f"{k}={v}" for k, v in sorted(n.labels.items()))
                                 or "-"),
                            Text(",".join(f"{k}:{v}" for k, v in n.queues.items())
                                 + (f" (tasks {','.join(n.serves)})" if n.serves else "")),
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
    view, nodes = run_async(app, lambda: _status(app))
    if as_json:
        s = view.series
        known = view.metrics_missing is None
        print_json({
            "states": {k: {"count": n, "capped": c} for k, (n, c) in view.states.items()},
            "last_hour": {"completed": s.hour_completed if known else None,
                          "failed": s.hour_failed if known else None,
                          "per_minute": s.per_minute if known else None,
                          "failure_rate": s.hour_failure_rate, "latency_p50": s.hour_p50,
                          "latency_p95": s.hour_p95, "missing": view.metrics_missing},
            "queues": [{"name": q.name, "paused": q.paused, "counts": q.counts,
                        "concurrency": q.concurrency} for q in view.queues],
            "workers": [{"id": n.id, "hostname": n.hostname, "alive": n.alive,
                         "running": n.running, "leader": n.leader, "version": n.version,
                         "labels": n.labels, "tasks": n.serves} for n in nodes],
        })
        return
    console().print(_tables(view, nodes))


# -- registration ---------------------------------------------------------------------------


@click.command("check", epilog=EPILOG)
@click.option("--min-workers", type=click.IntRange(min=0), default=0, show_default=True,
              help="Also require this many workers with a recent heartbeat.")
@json_option
@common_options
def check_cmd(min_workers: int, as_json: bool, app_path: str | None,
              url: str | None) -> None:
    """Liveness probe: exit 0 when the database answers and its schema is current
    (and enough workers are alive), else 1."""
    check(app_path, url, min_workers, as_json)

@click.command("status", epilog=EPILOG)
@json_option
@common_options
def status_cmd(as_json: bool, app_path: str | None, url: str | None) -> None:
    """A terminal overview: jobs per state, the last hour, queues and workers."""
    status(app_path, url, as_json)
