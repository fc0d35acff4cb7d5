"""The CLI's job commands: enqueue, list, show, and migrate, with their rendering.

Tables go to stdout through rich; ``--json`` prints one JSON document instead. User
data (arguments, errors, tracebacks) is always rendered as plain text, never markup.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import click
from rich import box
from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ._app import Conveyor
from ._errors import DatabaseUnavailableError
from ._job import Job, JobState
from ._storage import Migration, load_migrations

STATES = [s.value for s in JobState]

STATE_STYLES: dict[str, str] = {
    "scheduled": "cyan",
    "available": "blue",
    "running": "yellow",
    "completed": "green",
    "retryable": "magenta",
    "cancelled": "dim",
    "discarded": "red",
}


def console(*, stderr: bool = False) -> Console:
    """A console bound to the current sys.stdout/stderr (CliRunner swaps them)."""
    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def print_json(doc: Any) -> None:
    click.echo(json.dumps(doc, indent=2, default=str, ensure_ascii=False))


def state_text(state: JobState | str) -> Text:
    value = JobState(state).value
    return Text(value, style=STATE_STYLES.get(value, ""))


def when(value: datetime | None, *, short: bool = False) -> str:
    """Local time; ``short`` drops the year."""
    if value is None:
        return "-"
    return value.astimezone().strftime("%m-%d %H:%M:%S" if short else "%Y-%m-%d %H:%M:%S")


def shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def compact(value: Any, limit: int = 60) -> str:
    return shorten(json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":")),
                   limit)


def last_error(job: Job) -> str:
    if not job.errors:
        return ""
    return str(job.errors[-1].get("error", ""))


# -- enqueue ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class EnqueueRequest:
    queue: str | None = None
    priority: int | None = None
    delay: float | None = None
    max_attempts: int | None = None


def parse_arguments(args_json: str, kwargs_json: str) -> tuple[list[Any], dict[str, Any]]:
    """--args must be a JSON array and --kwargs a JSON object (else exit 2)."""
    args = _parse_json(args_json, "--args")
    if not isinstance(args, list):
        raise click.BadParameter("must be a JSON array, e.g. '[1, \"a\"]'", param_hint="--args")
    kwargs = _parse_json(kwargs_json, "--kwargs")
    if not isinstance(kwargs, dict):
        raise click.BadParameter("must be a JSON object, e.g. '{\"to\": \"a@b.c\"}'",
                                 param_hint="--kwargs")
    return args, kwargs


def _parse_json(text: str, hint: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint=hint) from None


def _accept_anything(*args: Any, **kwargs: Any) -> None:
    """Stands in for a task this process does not define (enqueue without --app)."""


async def enqueue(
    app: Conveyor,
    task_name: str,
    args: list[Any],
    kwargs: dict[str, Any],
    request: EnqueueRequest,
    *,
    known: bool,
) -> Job:
    """Enqueue through the task API; with ``known`` the task must be one of the app's."""
    task = app.tasks.get(task_name)
    if task is None and known:
        names = ", ".join(sorted(app.tasks)) or "(none)"
        raise click.BadParameter(f"no task {task_name!r} in the app; known tasks: {names}",
                                 param_hint="TASK")
    if task is None:
        try:
            task = app.task(name=task_name)(_accept_anything)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="TASK") from None
    try:
        with_options = task.options(
            queue=request.queue, priority=request.priority, delay=request.delay,
            max_attempts=request.max_attempts,
        )
        return await with_options.enqueue_async(*args, **kwargs)
    except (TypeError, ValueError) as exc:  # bad arguments, payload too large, bad queue
        raise click.UsageError(str(exc)) from None


# -- list and show -----------------------------------------------------------------------


async def list_jobs(
    app: Conveyor, state: str | None, queue: str | None, task: str | None, limit: int
) -> list[Job]:
    try:
        return await app.list_jobs_async(state=state, queue=queue, task=task, limit=limit)
    except ValueError as exc:  # a malformed queue or task name
        raise click.UsageError(str(exc)) from None


def call_text(job: Job, limit: int = 40) -> str:
    """``"a@b.c", subject="hi"``: the job's arguments as a call, shortened."""
    parts = [compact(a, limit) for a in job.args]
    parts += [f"{k}={compact(v, limit)}" for k, v in job.kwargs.items()]
    return shorten(", ".join(parts), limit)


def jobs_table(jobs: list[Job], *, wide: bool = True) -> Table:
    """Identity columns never wrap; narrow terminals get one args-or-error column."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("id", justify="right", style="bold", no_wrap=True)
    for name in ("task", "queue", "state"):
        table.add_column(name, no_wrap=True)
    table.add_column("attempt", justify="right", no_wrap=True)
    if wide:
        table.add_column("scheduled", no_wrap=True)
        table.add_column("args", overflow="ellipsis", min_width=12)
        table.add_column("last error", overflow="ellipsis", min_width=12)
    else:
        table.add_column("args / last error", overflow="ellipsis", min_width=12)
    for job in jobs:
        error = Text(shorten(last_error(job), 80), style="red")
        args = Text(call_text(job))
        extra = [when(job.scheduled_at, short=True), args, error] if wide else [
            error if job.errors else args]
        table.add_row(str(job.id), Text(job.task), Text(job.queue), state_text(job.state),
                      f"{job.attempt}/{job.max_attempts}", *extra)
    return table


def show_jobs(jobs: list[Job], *, as_json: bool, single: bool = False) -> None:
    """A list of jobs (or one, with ``single``) as a table or JSON."""
    if as_json:
        print_json(jobs[0].to_dict() if single else [job.to_dict() for job in jobs])
        return
    out = console()
    if not jobs:
        out.print("no jobs match", style="dim")
        return
    out.print(jobs_table(jobs, wide=out.width >= 120))
    if not single and len(jobs) > 1:
        out.print(f"{len(jobs)} job(s), newest first", style="dim")


def detail_table(job: Job) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for key, value in job.to_dict().items():
        if key == "errors":
            continue
        if key == "state":
            rendered: RenderableType = state_text(job.state)
        elif isinstance(value, list | dict):
            rendered = Text(json.dumps(value, indent=2, default=str, ensure_ascii=False))
        else:
            rendered = Text("-" if value is None else str(value))
        grid.add_row(key, rendered)
    return grid


def error_panels(job: Job) -> list[Panel]:
    panels = []
    for entry in job.errors:
        body = Text(str(entry.get("error", "")), style="red")
        if entry.get("traceback"):
            body.append("\n\n")
            body.append(str(entry["traceback"]).rstrip(), style="dim")
        title = f"attempt {entry.get('attempt', '?')} · {entry.get('at', '')}"
        panels.append(Panel(body, title=title, title_align="left", border_style="red"))
    return panels


def show_detail(job: Job, *, as_json: bool) -> None:
    if as_json:
        print_json(job.to_dict())
        return
    parts: list[RenderableType] = [detail_table(job)]
    errors = error_panels(job)
    parts.append(Text(f"\nerrors ({len(errors)})", style="bold"))
    parts.extend(errors or [Text("none", style="dim")])
    console().print(Group(*parts))


# -- migrate ---------------------------------------------------------------------------------


def dialect_of(url: str) -> str:
    scheme = urlsplit(url).scheme.lower()
    return "sqlite" if scheme == "sqlite" else "postgres"


def _describe(migrations: list[Migration], *, with_sql: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in migrations:
        item: dict[str, Any] = {"version": m.version, "name": m.name}
        if with_sql:
            item["sql"] = m.sql
        out.append(item)
    return out


def _print_sql(migrations: list[Migration]) -> None:
    for m in migrations:
        click.echo(f"-- migration {m.version:04d}_{m.name}")
        click.echo(m.sql.rstrip())
        click.echo()


def migrate(app: Conveyor, url: str, *, dry_run: bool, show_sql: bool, as_json: bool) -> bool:
    """Apply (or, with dry_run/show_sql, only list) migrations; True if any are pending.

    With show_sql and an unreachable database, prints every migration of the URL's
    dialect instead, without connecting.
    """
    read_only = dry_run or show_sql
    try:
        found = app.migrate(dry_run=read_only)
    except DatabaseUnavailableError as exc:
        if not show_sql:
            raise
        dialect = dialect_of(url)
        click.echo(f"database unreachable ({' '.join(str(exc).split())}); showing all "
                   f"{dialect} migrations", err=True)
        found = load_migrations(dialect)
        if as_json:
            print_json({"offline": True, "pending": _describe(found, with_sql=True)})
        else:
            _print_sql(found)
        return False
    finally:
        app.close()
    _report_migrations(found, read_only=read_only, show_sql=show_sql, as_json=as_json)
    return read_only and bool(found)


def _report_migrations(found: list[Migration], *, read_only: bool, show_sql: bool,
                       as_json: bool) -> None:
    if as_json:
        key = "pending" if read_only else "applied"
        print_json({key: _describe(found, with_sql=show_sql)})
        return
    if show_sql:
        _print_sql(found)
        if not found:
            click.echo("-- nothing pending: the schema is up to date")
        return
    out = console()
    if not found:
        out.print("nothing to apply: the schema is up to date", style="green")
        return
    verb = "pending" if read_only else "applied"
    for m in found:
        out.print(Text(f"{verb} {m.version:04d}_{m.name}"))
    if read_only:
        out.print(f"{len(found)} migration(s) pending; run `conveyor migrate` to apply",
                  style="yellow")
