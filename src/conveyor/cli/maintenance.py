"""One-off maintenance: ``conveyor prune``, ``conveyor rescue`` and ``conveyor jobs
discard / delete / purge``, each through the app's own methods (never storage).

A purge counts first and says what it matches, asks for a confirmation (``--yes``
skips it; without a terminal to ask on, it refuses unless ``--yes``), then deletes in
batches of ``--batch-size`` jobs, each its own short transaction, with a progress bar
on a terminal and one line per batch otherwise. ``--dry-run`` counts and changes
nothing. Running jobs are never purged.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import click
from rich import box
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .. import _payload
from .._job import Job, JobState
from ._base import EPILOG, JOB_ID, UsageFailure, common_options, json_option, run_async
from ._loading import open_app
from ._render import console, plain, print_json, safe, state_text, when

#: States a purge may name (running is accepted only to refuse it with its reason).
PURGE_STATES = [s.value for s in JobState]
PURGE_DEFAULT = ("completed", "cancelled", "discarded")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")

ShowJobs = Callable[..., None]


if TYPE_CHECKING:  # click < 8.2 has no generic ParamType at runtime
    _ParamType = click.ParamType[float, Any]
else:
    _ParamType = click.ParamType


class Duration(_ParamType):
    """Seconds (``90``) or a duration with units (``90s``, ``15m``, ``12h``, ``7d``,
    ``2w``, ``1d12h``); never negative."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        text = str(value).strip().lower()
        try:
            seconds = float(text)
        except ValueError:
            parts = _PART.findall(text)
            if not parts or "".join(n + u for n, u in parts) != text:
                self.fail(f"{value!r} is not a duration: use e.g. 90s, 15m, 12h, 7d, 2w "
                          "or 1d12h", param, ctx)
            seconds = sum(float(n) * _UNITS[u] for n, u in parts)
        if not 0 <= seconds < float("inf"):
            self.fail(f"{value!r} is not a duration >= 0", param, ctx)
        return seconds


DURATION = Duration()


def _checked(check: Callable[[str], str], value: str | None) -> str | None:
    try:
        return check(value) if value is not None else None
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


# -- prune and rescue --------------------------------------------------------------------


@click.command("prune", epilog=EPILOG,
               short_help="Delete old finished jobs now, as the pruner does.")
@click.option("--completed-retention", type=DURATION, metavar="DURATION",
              help="Delete completed and cancelled jobs finished longer ago than this "
              "(e.g. 1d). Default: the worker's default (1 day).")
@click.option("--discarded-retention", type=DURATION, metavar="DURATION",
              help="Delete discarded jobs finished longer ago than this (e.g. 7d). "
              "Default: the worker's default (7 days).")
@click.option("--batch-size", type=click.IntRange(1, 10_000), default=1000, show_default=True,
              help="Jobs deleted per transaction.")
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; delete nothing.")
@json_option
@common_options
def prune(completed_retention: float | None, discarded_retention: float | None,
          batch_size: int, dry_run: bool, as_json: bool, app_path: str | None,
          url: str | None) -> None:
    """Run retention now, as the pruner of a leader worker does every minute: delete
    old finished jobs in bounded batches (and long-silent nodes and rate-limit rows).

    To delete by state, queue or task instead, use `conveyor jobs purge`.
    """
    app = open_app(app_path, url)
    n = run_async(app, lambda: app.prune_now_async(
        completed_retention=completed_retention, discarded_retention=discarded_retention,
        dry_run=dry_run, batch_size=batch_size))
    if as_json:
        print_json({"dry_run": dry_run, "would_delete" if dry_run else "deleted": n})
    else:
        click.echo(f"{'would delete' if dry_run else 'deleted'} {n} old finished job(s)")


def _rescued_as(job: Job) -> JobState:
    """What a rescue makes of a running job (as the rescue statement decides)."""
    if job.cancel_requested:
        return JobState.CANCELLED
    return JobState.DISCARDED if job.attempt >= job.max_attempts else JobState.AVAILABLE


def _rescue_table(jobs: list[Job], dry_run: bool, nodes: dict[int, str | None]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for header in ("id", "task", "queue", "attempt", "node", "lease until",
                   "becomes" if dry_run else "now"):
        table.add_column(header, no_wrap=True)
    for job in jobs:
        state = _rescued_as(job) if dry_run else job.state
        table.add_row(str(job.id), plain(job.task), plain(job.queue),
                      f"{job.attempt}/{job.max_attempts}", plain(nodes.get(job.id) or "-"),
                      when(job.lease_expires_at) if dry_run else "-", state_text(state))
    return table


@click.command("rescue", epilog=EPILOG,
               short_help="Rescue jobs whose lease expired now, as the rescuer does.")
@click.option("--dry-run", is_flag=True,
              help="List the jobs that would be rescued; change nothing.")
@click.option("--limit", type=click.IntRange(1, 100_000), default=10_000, show_default=True,
              help="Rescue at most this many jobs.")
@json_option
@common_options
def rescue(dry_run: bool, limit: int, as_json: bool, app_path: str | None,
           url: str | None) -> None:
    """Rescue now the jobs whose lease expired (their worker died or stopped
    heartbeating), as every worker's rescuer does: each goes back to its queue, or ends
    discarded if that was its last attempt, or cancelled if a cancel was asked.
    """
    app = open_app(app_path, url)
    jobs = run_async(app, lambda: app.rescue_now_async(dry_run=dry_run, limit=limit))
    nodes = {j.id: j.lease_owner if dry_run else _last_node(j) for j in jobs}
    if as_json:
        print_json({"dry_run": dry_run, "count": len(jobs), "jobs": [
            {"id": j.id, "task": j.task, "queue": j.queue, "node": nodes[j.id],
             "state": (_rescued_as(j) if dry_run else j.state).value} for j in jobs]})
        return
    verb = "would rescue" if dry_run else "rescued"
    if jobs:
        console().print(_rescue_table(jobs, dry_run, nodes))
    click.echo(f"{verb} {len(jobs)} job(s) whose lease expired")


def _last_node(job: Job) -> str | None:
    node = job.errors[-1].get("node") if job.errors else None
    return str(node) if node is not None else None


# -- jobs discard / delete / purge -------------------------------------------------------


def _discard_command(show_jobs: ShowJobs) -> click.Command:
    @click.command("discard", epilog=EPILOG,
                   short_help="End a waiting job as discarded (not a running one).")
    @click.argument("job_id", metavar="ID", type=JOB_ID)
    @click.option("--reason", help="Added to the job's error entry.")
    @json_option
    @common_options
    def jobs_discard(job_id: int, reason: str | None, as_json: bool, app_path: str | None,
                     url: str | None) -> None:
        """End a waiting job (scheduled, available or retryable) as discarded, with an
        error entry saying an operator did it. A running job is refused: cancel it
        (`conveyor jobs cancel ID`) and its worker stops it."""
        app = open_app(app_path, url)
        job = run_async(app, lambda: app.discard_job_async(job_id, reason=reason, source="cli"))
        show_jobs([job], as_json=as_json, single=True)

    return jobs_discard


def _delete_command() -> click.Command:
    @click.command("delete", epilog=EPILOG,
                   short_help="Delete one job (a running one only with --force).")
    @click.argument("job_id", metavar="ID", type=JOB_ID)
    @click.option("--force", is_flag=True,
                  help="Delete a running job too: its worker's outcome is then dropped and "
                  "its next heartbeat stops the handler.")
    @json_option
    @common_options
    def jobs_delete(job_id: int, force: bool, as_json: bool, app_path: str | None,
                    url: str | None) -> None:
        """Delete one job's row, whatever its state; a running job only with --force
        (else: cancel it first). It cannot be undone."""
        app = open_app(app_path, url)
        job = run_async(app, lambda: app.delete_job_async(job_id, force=force, source="cli"))
        if as_json:
            print_json({"deleted": job.id, "task": job.task, "queue": job.queue,
                        "state": job.state.value})
        else:
            click.echo(f"deleted job {job.id} ({safe(job.task)} on {safe(job.queue)}, "
                       f"was {job.state.value})")

    return jobs_delete


def _summary(counts: dict[str, int]) -> str:
    total = sum(counts.values())
    parts = ", ".join(f"{n} {state}" for state, n in counts.items())
    return f"{total} job(s)" + (f" ({parts})" if parts else "")


def _describe(states: Sequence[str], queue: str | None, task: str | None,
              older_than: float | None) -> str:
    text = f"in state {', '.join(states)}"
    if queue:
        text += f" of queue {safe(queue)}"
    if task:
        text += f" of task {safe(task)}"
    if older_than is not None:
        text += f" older than {human(older_than)}"
    return text


def human(seconds: float) -> str:
    """``30d``, ``12h``, ``90s``: a duration as it would be typed."""
    for unit in ("w", "d", "h", "m"):
        if seconds and seconds % _UNITS[unit] == 0:
            return f"{seconds / _UNITS[unit]:g}{unit}"
    return f"{seconds:g}s"


def _interactive() -> bool:
    """Whether a confirmation can be asked (tests replace this to act as a terminal)."""
    return sys.stdin.isatty()


class PurgeReport:
    """The purge's terminal output: the count, the confirmation, the progress."""

    def __init__(self, what: str, *, dry_run: bool, yes: bool, quiet: bool) -> None:
        self.what, self.dry_run, self.yes, self.quiet = what, dry_run, yes, quiet
        self.counts: dict[str, int] = {}
        self._progress: Progress | None = None
        self._task: Any = None

    def on_count(self, counts: dict[str, int]) -> bool:
        self.counts = counts
        total = sum(counts.values())
        if not self.quiet:
            click.echo(f"{_summary(counts)} match {self.what}", err=not self.dry_run)
        if self.dry_run or total == 0:
            return True
        if not self.yes:
            if not _interactive():
                raise UsageFailure(f"refusing to purge {total} job(s) without confirmation: "
                                   "no terminal to ask on; pass --yes")
            click.confirm(f"Delete these {total} job(s)? This cannot be undone", abort=True,
                          err=True)
        self._start(total)
        return True

    def _start(self, total: int) -> None:
        """A bar from the first batch on, on a terminal (elsewhere: a line per batch)."""
        out = console(stderr=True)
        if self.quiet or not out.is_terminal:
            return
        self._progress = Progress(
            TextColumn("purging"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=out, transient=True)
        self._progress.start()
        self._task = self._progress.add_task("purge", total=total)

    def on_progress(self, done: int, total: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=done)
        elif not self.quiet:
            click.echo(f"purged {done} of {total}", err=True)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


def _purge_command() -> click.Command:
    @click.command("purge", epilog=EPILOG,
                   short_help="Delete matching jobs in batches: count, confirm, progress.")
    @click.option("--state", "states", multiple=True, type=click.Choice(PURGE_STATES),
                  help="Purge jobs in this state (repeatable). Default: completed, "
                  "cancelled, discarded. Running jobs are never purged.")
    @click.option("--queue", help="Only jobs of this queue.")
    @click.option("--task", "task_name", help="Only jobs of this task.")
    @click.option("--older-than", type=DURATION, metavar="DURATION",
                  help="Only jobs finished (never finished: created) longer ago than this, "
                  "e.g. 30d, 12h, 1d12h.")
    @click.option("--batch-size", type=click.IntRange(1, 10_000), default=1000,
                  show_default=True, help="Jobs deleted per transaction.")
    @click.option("--dry-run", is_flag=True, help="Count the matching jobs; delete nothing.")
    @click.option("-y", "--yes", is_flag=True,
                  help="Do not ask for confirmation (needed without a terminal).")
    @json_option
    @common_options
    def jobs_purge(states: tuple[str, ...], queue: str | None, task_name: str | None,
                   older_than: float | None, batch_size: int, dry_run: bool, yes: bool,
                   as_json: bool, app_path: str | None, url: str | None) -> None:
        """Delete every job matching the filters, in batches of --batch-size jobs (each
        its own short transaction): count first, confirm, then a progress bar. Give at
        least one filter. Only jobs that matched when counted are deleted.
        """
        if not (states or queue or task_name or older_than is not None):
            raise click.UsageError("give at least one filter (--state, --queue, --task, "
                                   "--older-than)")
        if "running" in states:
            raise click.UsageError("running jobs are never purged: cancel them first "
                                   "(`conveyor jobs cancel ID`), or delete one with "
                                   "`conveyor jobs delete ID --force`")
        named = states or PURGE_DEFAULT
        queue = _checked(_payload.check_queue_name, queue)
        task_name = _checked(_payload.check_task_name, task_name)
        app = open_app(app_path, url)
        report = PurgeReport(_describe(named, queue, task_name, older_than),
                             dry_run=dry_run, yes=yes, quiet=as_json)
        try:
            n = run_async(app, lambda: app.purge_jobs_async(
                states=named, queue=queue, task=task_name, older_than=older_than,
                dry_run=dry_run, batch_size=batch_size, on_count=report.on_count,
                on_progress=report.on_progress, source="cli"))
        finally:
            report.close()
        if as_json:
            print_json({"dry_run": dry_run, "matched": report.counts,
                        "would_delete" if dry_run else "deleted": n})
        elif not dry_run:
            click.echo(f"deleted {n} job(s)")

    return jobs_purge


def job_commands(show_jobs: ShowJobs) -> list[click.Command]:
    """``jobs discard``, ``jobs delete`` and ``jobs purge``."""
    return [_discard_command(show_jobs), _delete_command(), _purge_command()]


__all__ = ["DURATION", "job_commands", "prune", "rescue"]
