"""``conveyor jobs retry``: one job, several, or every job matching filters.

With filters (``--state``, ``--queue``, ``--task``) the retry goes through
``app.retry_matching_async`` after a confirmation that says how many jobs and which
states (``--yes`` skips it). Without ``--state`` it takes failed, discarded and
cancelled jobs only: completed jobs are retried only when ``--state completed`` says so
(re-running them re-sends every email, re-charges every card).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import click

from .._app import Conveyor, JobFilter, bulk_states
from .._app.operations import Operations
from .._errors import InvalidStateError, JobNotFoundError
from .._job import RETRYABLE_FROM, Job, JobState
from .._payload import check_queue_name, check_task_name
from ._base import EPILOG, EXIT_RUNTIME, JOB_ID, CliFailure, common_options, json_option, run_async
from ._loading import open_app
from ._render import print_json, safe

MAX_BULK = 100_000

ShowJobs = Callable[..., None]


def job_filter(ids: Sequence[int], states: Sequence[str], queue: str | None,
               task: str | None) -> JobFilter:
    try:
        return JobFilter(
            states=bulk_states("retry", tuple(JobState(s) for s in states)),
            queue=check_queue_name(queue) if queue is not None else None,
            task=check_task_name(task) if task is not None else None,
            ids=tuple(ids),
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def describe(flt: JobFilter) -> str:
    parts = [f"in state {', '.join(s.value for s in flt.states)}"]
    if flt.queue:
        parts.append(f"of queue {safe(flt.queue)}")
    if flt.task:
        parts.append(f"of task {safe(flt.task)}")
    if flt.ids:
        parts.append(f"among ids {', '.join(map(str, flt.ids))}")
    return " ".join(parts)


async def retry_matching(app: Conveyor, flt: JobFilter, limit: int, yes: bool) -> int:
    """Count, confirm (unless ``yes``), retry: how many were retried."""
    count = await Operations(app, source="cli").count_matching(flt, limit)
    if count == 0:
        return 0
    if not yes:
        more = "+" if count >= limit else ""
        click.confirm(f"Retry {count}{more} job(s) {describe(flt)}?", abort=True, err=True)
    return await app.retry_matching_async(flt, limit=limit, source="cli")


async def retry_each(app: Conveyor, ids: Sequence[int]) -> tuple[list[Job], list[str]]:
    done: list[Job] = []
    failed: list[str] = []
    for job_id in ids:
        try:
            done.append(await app.retry_job_async(job_id, source="cli"))
        except (JobNotFoundError, InvalidStateError) as exc:  # the others go on
            failed.append(str(exc))
    return done, failed


def retry_command(show_jobs: ShowJobs) -> click.Command:
    @click.command("retry", epilog=EPILOG)
    @click.argument("job_ids", metavar="[ID]...", nargs=-1, type=JOB_ID)
    @click.option("--state", "states", multiple=True,
                  type=click.Choice([s.value for s in RETRYABLE_FROM]),
                  help="Retry jobs in this state (repeatable). Default with filters: "
                  "retryable, discarded, cancelled; completed jobs only when named.")
    @click.option("--queue", help="Retry the matching jobs of this queue.")
    @click.option("--task", "task_name", help="Retry the matching jobs of this task.")
    @click.option("--limit", type=click.IntRange(1, MAX_BULK), default=10_000,
                  show_default=True, help="Retry at most this many matching jobs.")
    @click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
    @json_option
    @common_options
    def jobs_retry(job_ids: tuple[int, ...], states: tuple[str, ...], queue: str | None,
                   task_name: str | None, limit: int, yes: bool, as_json: bool,
                   app_path: str | None, url: str | None) -> None:
        """Put jobs back in their queue now, with one more attempt: the jobs with the
        ids given, or every job matching --state/--queue/--task (after a confirmation).
        """
        if not job_ids and not (states or queue or task_name):
            raise click.UsageError("give job ids, or filters (--state, --queue, --task)")
        app = open_app(app_path, url)
        if states or queue or task_name:
            flt = job_filter(job_ids, states, queue, task_name)
            n = run_async(app, lambda: retry_matching(app, flt, limit, yes))
            if as_json:
                print_json({"retried": n, "states": [s.value for s in flt.states]})
            else:
                click.echo(f"retried {n} job(s) {describe(flt)}")
            return
        done, failed = run_async(app, lambda: retry_each(app, job_ids))
        if len(job_ids) == 1 and failed:
            raise CliFailure(failed[0])
        if done:
            show_jobs(done, as_json=as_json, single=len(job_ids) == 1)
        for line in failed:
            click.echo(f"Error: {safe(line)}", err=True)
        if failed:
            raise SystemExit(EXIT_RUNTIME)

    return jobs_retry


__all__ = ["retry_command"]
