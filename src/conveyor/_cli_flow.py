"""The CLI's flow-control commands: queues, schedules, and `jobs explain`."""

from __future__ import annotations

import dataclasses
from typing import Any

import click
from rich import box
from rich.table import Table
from rich.text import Text

from . import cli as root
from ._app import Conveyor, QueueInfo, ScheduleInfo
from ._cli_jobs import console, print_json, when
from ._cli_worker import open_app

opts = root.common_options
as_json_opt = root.json_option


def _queues_table(queues: list[QueueInfo]) -> Table:
    table = Table(box=box.SIMPLE_HEAVY, title="Queues")
    for header in ("queue", "paused", "concurrency", "rate limit", "nodes", "available",
                   "running", "scheduled", "retryable", "discarded"):
        table.add_column(header)
    for q in queues:
        limit = "per worker" if q.concurrency is None else f"{q.concurrency} ({q.scope})"
        table.add_row(Text(q.name), Text("paused", style="red") if q.paused else Text("no"),
                      limit, q.rate_limit or "-", str(len(q.nodes)),
                      *(str(q.counts.get(s, 0)) for s in
                        ("available", "running", "scheduled", "retryable", "discarded")))
    return table


def _schedules_table(schedules: list[ScheduleInfo]) -> Table:
    table = Table(box=box.SIMPLE_HEAVY, title="Schedules")
    for header in ("name", "task", "cron", "timezone", "misfire", "paused", "last run",
                   "next run", "defined in"):
        table.add_column(header)
    for s in schedules:
        r = s.row
        misfire = f"backfill {r.backfill}" if r.misfire == "backfill" else r.misfire
        table.add_row(Text(r.name), Text(r.task), Text(r.cron), r.timezone, misfire,
                      Text("paused", style="red") if r.paused else Text("no"),
                      when(r.last_tick), when(s.next_run), "code" if s.defined_in_code else "runtime")
    return table


def _doc(value: Any) -> Any:
    return dataclasses.asdict(value)


def register(cli: click.Group, jobs: click.Group) -> None:
    """Attach the commands to the root group and the `jobs` group."""

    @jobs.command("explain", epilog=root.EPILOG)
    @click.argument("job_id", metavar="ID", type=click.IntRange(min=1))
    @as_json_opt
    @opts
    def jobs_explain(job_id: int, as_json: bool, app_path: str | None, url: str | None) -> None:
        """Say why a job is not running yet (or that it is next)."""
        app = open_app(app_path, url)
        found = root.run_async(app, lambda: app.explain_job_async(job_id))
        if as_json:
            print_json({"id": job_id, "state": found.job.state.value, "reasons": found.reasons,
                        "notes": found.notes})
        else:
            console().print(Text(str(found)))

    @cli.group(context_settings=root.CONTEXT, epilog=root.EPILOG)
    def queues() -> None:
        """See and control queues on every worker: list, pause, resume, scale, rate."""

    @queues.command("list", epilog=root.EPILOG)
    @as_json_opt
    @opts
    def queues_list(as_json: bool, app_path: str | None, url: str | None) -> None:
        """Queues with their live settings, serving nodes and jobs per state."""
        app = open_app(app_path, url)
        found = root.run_async(app, app.list_queues_async)
        if as_json:
            print_json([_doc(q) for q in found])
        else:
            console().print(_queues_table(found))

    def _queue_action(name: str, app_path: str | None, url: str | None, verb: str,
                      action: Any) -> None:
        app = open_app(app_path, url)
        root.run_async(app, lambda: action(app))
        click.echo(f"queue {name}: {verb} (every worker applies it within about a second)")

    @queues.command("pause", epilog=root.EPILOG)
    @click.argument("name")
    @opts
    def queues_pause(name: str, app_path: str | None, url: str | None) -> None:
        """Stop starting jobs of queue NAME on every worker."""
        _queue_action(name, app_path, url, "paused", lambda a: a.pause_queue_async(name))

    @queues.command("resume", epilog=root.EPILOG)
    @click.argument("name")
    @opts
    def queues_resume(name: str, app_path: str | None, url: str | None) -> None:
        """Start jobs of queue NAME again."""
        _queue_action(name, app_path, url, "resumed", lambda a: a.resume_queue_async(name))

    @queues.command("scale", epilog=root.EPILOG)
    @click.argument("name")
    @click.argument("concurrency", required=False, type=click.IntRange(min=1))
    @click.option("--per-node", is_flag=True,
                  help="Apply CONCURRENCY on every node instead of splitting it across nodes.")
    @click.option("--reset", is_flag=True, help="Back to each worker's own -q/-c setting.")
    @opts
    def queues_scale(name: str, concurrency: int | None, per_node: bool, reset: bool,
                     app_path: str | None, url: str | None) -> None:
        """Set queue NAME's concurrency: a cluster total shared by its nodes (default)."""
        if (concurrency is None) == (not reset):
            raise click.UsageError("give CONCURRENCY or --reset")
        verb = "reset to each worker's setting" if reset else (
            f"concurrency {concurrency} {'per node' if per_node else 'in total'}")
        _queue_action(name, app_path, url, verb,
                      lambda a: a.set_queue_concurrency_async(name, concurrency, per_node=per_node))

    @queues.command("rate", epilog=root.EPILOG)
    @click.argument("name")
    @click.argument("rate", required=False)
    @opts
    def queues_rate(name: str, rate: str | None, app_path: str | None, url: str | None) -> None:
        """Limit how often jobs of queue NAME start, like 100/m; no RATE removes it."""
        _queue_action(name, app_path, url, f"rate limit {rate or 'removed'}",
                      lambda a: a.set_queue_rate_limit_async(name, rate))

    _schedule_commands(cli)


def _schedule_commands(cli: click.Group) -> None:
    @cli.group(context_settings=root.CONTEXT, epilog=root.EPILOG)
    def schedules() -> None:
        """Periodic jobs: list, pause, resume, run now."""

    @schedules.command("list", epilog=root.EPILOG)
    @as_json_opt
    @opts
    def schedules_list(as_json: bool, app_path: str | None, url: str | None) -> None:
        """Schedules with their last and next run."""
        app = open_app(app_path, url)
        found = root.run_async(app, app.list_schedules_async)
        if as_json:
            print_json([{**_doc(s.row), "next_run": s.next_run, "defined_in_code": s.defined_in_code}
                        for s in found])
        else:
            console().print(_schedules_table(found))

    def _act(app: Conveyor, name: str, verb: str) -> Any:
        return {"pause": app.pause_schedule_async, "resume": app.resume_schedule_async,
                "run": app.trigger_schedule_async}[verb](name)

    for verb, text in (("pause", "Stop enqueuing schedule NAME's ticks."),
                       ("resume", "Enqueue schedule NAME's ticks again."),
                       ("run", "Enqueue schedule NAME's job now, outside its ticks.")):

        def command(name: str, app_path: str | None, url: str | None, verb: str = verb) -> None:
            app = open_app(app_path, url)
            result = root.run_async(app, lambda: _act(app, name, verb))
            done = f"enqueued job {result.id}" if verb == "run" else f"{verb}d"
            click.echo(f"schedule {name}: {done}")

        command.__doc__ = text
        schedules.command(verb, epilog=root.EPILOG)(opts(click.argument("name")(command)))
