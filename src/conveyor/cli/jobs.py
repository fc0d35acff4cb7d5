"""``conveyor jobs``: list, show, retry, cancel and explain jobs, with their rendering.

Tables go to stdout through rich and fit the terminal (long arguments and errors end
with an ellipsis); ``--json`` prints one JSON document instead. Stored text is printed
through ``_render.safe`` and jobs through the dashboard's redaction rule
(``conveyor._redact``), unless ``--show-secrets``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import click
from rich import box
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .._app import Conveyor, Dependency, JobFilter, SearchPage, search
from .._app.operations import Operations
from .._job import Job, JobState
from .._redact import redact_secrets
from ._base import (
    CONTEXT,
    EPILOG,
    JOB_ID,
    CliFailure,
    common_options,
    json_option,
    run_async,
)
from ._loading import open_app
from ._render import (
    STATES,
    compact,
    console,
    fits_terminal,
    last_error,
    plain,
    print_json,
    safe,
    shorten,
    state_text,
    when,
)
from ._retry import retry_command
from .maintenance import job_commands

# -- list and show -----------------------------------------------------------------------


async def list_jobs(app: Conveyor, filters: ListFilters, limit: int,
                    before: int | None = None, windows: int = 1) -> SearchPage:
    """The jobs ``jobs list`` shows, and where the search ended. By tag or argument,
    each window reads ``search.SCAN`` ids; up to ``windows`` of them are read, going on
    to older ones while the table is not full."""
    jobs: list[Job] = []
    first: SearchPage | None = None
    try:
        for _ in range(windows):
            page = await app.search_jobs_async(
                state=filters.state, queue=filters.queue, task=filters.task,
                limit=limit - len(jobs), before_id=before, tag=filters.tag,
                args_contains=filters.args or None)
            first, jobs, before = first or page, jobs + page.jobs, page.next_before_id
            if before is None or len(jobs) >= limit:
                break
    except (ValueError, TypeError) as exc:  # a malformed name, tag or argument filter
        raise click.UsageError(str(exc)) from None
    assert first is not None  # windows >= 1
    return SearchPage(jobs, page.next_before_id, page.scanned_from, first.scanned_to)


@dataclasses.dataclass(frozen=True, slots=True)
class ListFilters:
    """``jobs list``'s filters; ``args`` from its ``--arg NAME=VALUE`` options."""

    state: str | None = None
    queue: str | None = None
    task: str | None = None
    tag: str | None = None
    args: dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def parse(cls, state: str | None, queue: str | None, task: str | None, tag: str | None,
              arg: Sequence[str]) -> ListFilters:
        try:
            args = search.args_from_pairs(list(arg))
            if args:
                search.check_args_contains(args)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--arg") from None
        return cls(state, queue, task, tag, args)


async def count_listed(app: Conveyor, filters: ListFilters, listed: SearchPage) -> int:
    """How many jobs ``jobs list``'s filters match, counted up to ``COUNT_CAP``: by tag
    or argument, within the ids the search read (``listed.scanned_from`` to ``_to``)."""
    flt = JobFilter(states=(JobState(filters.state),) if filters.state else (),
                    queue=filters.queue, task=filters.task, tag=filters.tag,
                    args_contains=(search.check_args_contains(filters.args)
                                   if filters.args else None),
                    min_id=listed.scanned_from, max_id=listed.scanned_to)
    return await Operations(app, source="cli").count_matching(flt, COUNT_CAP)


def go_on_line(listed: SearchPage, limit: int) -> str | None:
    """Where a search by tag or argument stopped, and the option that goes on from
    there; None when it read down to the oldest job."""
    if listed.next_before_id is None:
        return None
    cursor = f"--before-id {listed.next_before_id}"
    if listed.scanned_from is None or len(listed.jobs) >= limit:
        return f"older jobs: {cursor}"
    return (f"searched jobs #{listed.scanned_from} to #{listed.scanned_to} only; older "
            f"jobs: {cursor} (or --windows N to read N windows of {search.SCAN:,} ids)")


#: ``jobs list`` counts the jobs its filters match up to this many (then "100,000+").
COUNT_CAP = 100_000


def call_text(job: Job, limit: int = 40, each: int = 40) -> str:
    """``"a@b.c", subject="hi"``: the job's arguments as a call, shortened to ``limit``
    (each argument to ``each`` characters at most)."""
    each = min(limit, each)
    parts = [compact(a, each) for a in job.args]
    parts += [f"{k}={compact(v, each)}" for k, v in job.kwargs.items()]
    return shorten(", ".join(parts), limit)


def _fixed_widths(jobs: list[Job], wide: bool) -> list[int]:
    """Widths of the columns that never shrink: id, task, queue, state, attempt
    (and scheduled, in a wide table)."""
    columns = [
        ("id", [str(job.id) for job in jobs]),
        ("task", [safe(job.task) for job in jobs]),
        ("queue", [safe(job.queue) for job in jobs]),
        ("state", ["available"]),
        ("attempt", [f"{job.attempt}/{job.max_attempts}" for job in jobs]),
    ]
    if wide:
        columns.append(("scheduled", ["00-00 00:00:00"]))
    return [max(len(head), *(len(v) for v in values)) for head, values in columns]


def text_widths(jobs: list[Job], width: int, wide: bool) -> tuple[int, int]:
    """What is left of ``width`` for the args and the error: each row stays one line."""
    fixed = _fixed_widths(jobs, wide)
    columns = len(fixed) + (2 if wide else 1)
    free = width - sum(fixed) - 3 * (columns - 1) - 2  # 1 + 1 + 1 between, an edge each side
    if not wide:
        return max(free, 12), max(free, 12)
    args = max(free * 2 // 5, 12)
    return args, max(free - args, 12)


def jobs_table(jobs: list[Job], *, wide: bool = True, width: int = 200,
               full: bool = False) -> Table:
    """One line per job, as wide as ``width``: the identity columns are whole, the
    args and the last error end with an ellipsis where the terminal ends; narrow
    terminals get one column for the args or the error. ``full`` (off a terminal):
    nothing is cut."""
    args_width, error_width = text_widths(jobs, width, wide)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("id", justify="right", style="bold", no_wrap=True)
    for name in ("task", "queue", "state"):
        table.add_column(name, no_wrap=True)
    table.add_column("attempt", justify="right", no_wrap=True)
    if wide:
        table.add_column("scheduled", no_wrap=True)
        table.add_column("args", no_wrap=True, overflow="ellipsis")
        table.add_column("last error", no_wrap=True, overflow="ellipsis")
    else:
        table.add_column("args / last error", no_wrap=True, overflow="ellipsis")
    for job in jobs:
        error = Text(shorten(safe(last_error(job)), error_width), style="red")
        args = plain(call_text(job, args_width, args_width if full else 40))
        extra = [when(job.scheduled_at, short=True), args, error] if wide else [
            error if job.errors else args]
        table.add_row(str(job.id), plain(job.task), plain(job.queue), state_text(job.state),
                      f"{job.attempt}/{job.max_attempts}", *extra)
    return table


def show_jobs(jobs: list[Job], *, as_json: bool, single: bool = False,
              secrets: bool = False, matching: int | None = None) -> None:
    """A list of jobs (or one, with ``single``) as a table or JSON, secrets redacted
    unless ``secrets``; ``matching``: how many jobs matched (more than were listed
    when ``--limit`` cut the list), said under the table."""
    jobs = jobs if secrets else [redact_secrets(job) for job in jobs]
    if as_json:
        print_json(jobs[0].to_dict() if single else [job.to_dict() for job in jobs])
        return
    out = console()
    if not jobs:
        out.print("no jobs match", style="dim")
        return
    out.print(jobs_table(jobs, wide=out.width >= 120, width=out.width,
                         full=not fits_terminal(out)))
    if not single:
        out.print(listed_line(len(jobs), matching), style="dim")


def listed_line(listed: int, matching: int | None) -> str:
    """``50 of 1,001 job(s), newest first (--limit)``: what was listed of how many."""
    if matching is None or matching <= listed:
        return f"{listed:,} job(s), newest first"
    more = "+" if matching >= COUNT_CAP else ""
    return f"{listed:,} of {matching:,}{more} job(s), newest first (--limit)"


def detail_table(job: Job) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for key, value in job.to_dict().items():
        if key in ("errors", "progress_message"):
            continue  # errors get panels; the message shares the progress line
        rendered: RenderableType
        if key == "progress":
            rendered = plain(progress_line(job))
        elif key == "state":
            rendered = state_text(job.state)
        elif isinstance(value, list | dict):
            text = json.dumps(value, indent=2, default=str, ensure_ascii=False)
            rendered = Text(safe(text, multiline=True))
        else:
            rendered = plain("-" if value is None else value)
        grid.add_row(key, rendered)
    return grid


def progress_line(job: Job, width: int = 20) -> str:
    """``[#########-----------]  45%  message``: what the handler last reported; a
    completed job is done whatever it last reported (100%)."""
    if job.progress is None:
        return "-"
    progress = 1.0 if job.state is JobState.COMPLETED else job.progress
    filled = round(progress * width)
    line = f"[{'#' * filled}{'-' * (width - filled)}] {progress * 100:3.0f}%"
    return f"{line}  {job.progress_message}" if job.progress_message else line


def error_panels(job: Job, expand: bool = True) -> list[Panel]:
    """One panel per attempt's error; ``expand=False`` off a terminal (a panel as wide
    as its text, not as the unbounded width)."""
    panels = []
    for entry in job.errors:
        body = Text(safe(entry.get("error", ""), multiline=True), style="red")
        if entry.get("traceback"):
            body.append("\n\n")
            body.append(safe(entry["traceback"], multiline=True).rstrip(), style="dim")
        title = f"attempt {safe(entry.get('attempt', '?'))} · {safe(entry.get('at', ''))}"
        panels.append(Panel(body, title=title, title_align="left", border_style="red",
                            expand=expand))
    return panels


def show_detail(job: Job, *, as_json: bool, secrets: bool = False,
                dependencies: Sequence[Dependency] = ()) -> None:
    job = job if secrets else redact_secrets(job)
    deps: list[dict[str, str | int | None]] = [
        {"id": d.id, "task": d.task, "state": d.state.value if d.state else "deleted",
         "on_failure": d.on_failure} for d in dependencies]
    if as_json:
        print_json({**job.to_dict(), "dependencies": deps} if deps else job.to_dict())
        return
    parts: list[RenderableType] = [detail_table(job)]
    if deps:
        parts.append(Text("\ndepends on", style="bold"))
        parts.extend(Text.assemble(
            f"#{d.id} {safe(d.task or '?')} ",
            state_text(d.state) if d.state else Text("deleted", style="dim"),
            f" (on failure: {d.on_failure})") for d in dependencies)
    out = console()
    errors = error_panels(job, expand=fits_terminal(out))
    parts.append(Text(f"\nerrors ({len(errors)})", style="bold"))
    parts.extend(errors or [Text("none", style="dim")])
    out.print(Group(*parts))


def secrets_option(fn: click.decorators.FC) -> click.decorators.FC:
    return click.option(
        "--show-secrets", "secrets", is_flag=True,
        help="Show the values of secret-looking keys (password, token, ...), which are "
        "redacted by default as on the dashboard.")(fn)


# -- commands ---------------------------------------------------------------------------


@click.group(context_settings=CONTEXT, epilog=EPILOG)
def jobs() -> None:
    """Inspect and manage jobs: list, show, retry, cancel, explain, discard, delete, purge."""


@jobs.command("list", epilog=EPILOG)
@click.option("--state", type=click.Choice(STATES), help="Only jobs in this state.")
@click.option("--queue", help="Only jobs of this queue.")
@click.option("--task", "task_name", help="Only jobs of this task.")
@click.option("--tag", help="Only jobs with this tag.")
@click.option("--arg", "arg", multiple=True, metavar="NAME=VALUE",
              help="Only jobs with this keyword argument (VALUE as JSON when it parses, "
                   "else text; a.b=V reaches into a dict); repeatable.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("--before-id", type=JOB_ID, metavar="ID",
              help="Only jobs older than this id (the cursor the previous list printed).")
@click.option("--windows", type=click.IntRange(1, 1000), default=1, show_default=True,
              help="With --tag or --arg: read up to this many windows of 100,000 job ids, "
                   "going on to older ones while the list is not full.")
@secrets_option
@json_option
@common_options
def jobs_list(state: str | None, queue: str | None, task_name: str | None, tag: str | None,
              arg: tuple[str, ...], limit: int, before_id: int | None, windows: int,
              secrets: bool, as_json: bool, app_path: str | None, url: str | None) -> None:
    """List jobs, newest first. With --tag or --arg, each window reads 100,000 job ids
    (below --before-id, or the newest): the list says where it stopped and how to go on."""
    filters = ListFilters.parse(state, queue, task_name, tag, arg)
    app = open_app(app_path, url)
    listed = run_async(app, lambda: list_jobs(app, filters, limit, before_id, windows))
    matching = None
    if len(listed.jobs) == limit and not as_json:  # --limit may have cut the list
        matching = run_async(app, lambda: count_listed(app, filters, listed))
    show_jobs(listed.jobs, as_json=as_json, secrets=secrets, matching=matching)
    go_on = go_on_line(listed, limit)
    if go_on is not None:
        console(stderr=as_json).print(go_on, style="dim", soft_wrap=True)


@jobs.command("show", epilog=EPILOG)
@click.argument("job_id", metavar="ID", type=JOB_ID)
@secrets_option
@json_option
@common_options
def jobs_show(job_id: int, secrets: bool, as_json: bool, app_path: str | None,
              url: str | None) -> None:
    """Show every field of one job, with each attempt's error and traceback, and the
    jobs it depends on."""
    app = open_app(app_path, url)
    job = run_async(app, lambda: app.get_job_async(job_id))
    if job is None:
        raise CliFailure(f"no job with id {job_id}")
    deps = run_async(app, lambda: app.job_dependencies_async(job_id))
    show_detail(job, as_json=as_json, secrets=secrets, dependencies=deps)


jobs.add_command(retry_command(show_jobs))
for _command in job_commands(show_jobs):
    jobs.add_command(_command)


@jobs.command("cancel", epilog=EPILOG)
@click.argument("job_id", metavar="ID", type=JOB_ID)
@json_option
@common_options
def jobs_cancel(job_id: int, as_json: bool, app_path: str | None, url: str | None) -> None:
    """Cancel a job: at once if queued; a running job is stopped by its worker."""
    app = open_app(app_path, url)
    job = run_async(app, lambda: app.cancel_job_async(job_id, source="cli"))
    show_jobs([job], as_json=as_json, single=True)


@jobs.command("explain", epilog=EPILOG)
@click.argument("job_id", metavar="ID", type=JOB_ID)
@json_option
@common_options
def jobs_explain(job_id: int, as_json: bool, app_path: str | None, url: str | None) -> None:
    """Say why a job is not running yet (or that it is next)."""
    app = open_app(app_path, url)
    found = run_async(app, lambda: app.explain_job_async(job_id))
    if as_json:
        print_json({"id": job_id, "state": found.job.state.value, "reasons": found.reasons,
                    "notes": found.notes})
    else:
        console().print(Text(safe(found, multiline=True)))
