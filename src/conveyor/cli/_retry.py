"""``conveyor jobs retry``: one job, several, or every job matching filters.

With ``--args``/``--kwargs`` (one job id) it is edit and retry: the job runs with the new
arguments, checked against the task's signature when ``--app`` defines it, and the edit
is recorded with the old ones and the operating-system user who asked.

With filters (``--state``, ``--queue``, ``--task``) the retry goes through
``app.retry_matching_async`` after a confirmation that says how many jobs and which
states (``--yes`` skips it). Without ``--state`` it takes failed, discarded and
cancelled jobs only: completed jobs are retried only when ``--state completed`` says so
(re-running them re-sends every email, re-charges every card).
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Callable, Sequence
from typing import Any

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


def _json_of(text: str | None, kind: type, hint: str) -> Any:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint=hint) from None
    if not isinstance(value, kind):
        what = "array, e.g. '[1, \"a\"]'" if kind is list else "object, e.g. '{\"to\": \"a@b.c\"}'"
        raise click.BadParameter(f"must be a JSON {what}", param_hint=hint)
    return value


def _os_user() -> str | None:
    try:
        return getpass.getuser()[:200] or None
    except (KeyError, OSError):  # no name for this uid (a container)
        return None


def edit_and_retry(app: Conveyor, job_id: int, args_json: str | None,
                   kwargs_json: str | None) -> Job:
    args = _json_of(args_json, list, "--args")
    kwargs = _json_of(kwargs_json, dict, "--kwargs")
    try:
        return run_async(app, lambda: app.retry_job_async(
            job_id, args=args, kwargs=kwargs, source="cli", user=_os_user()))
    except (JobNotFoundError, InvalidStateError) as exc:
        raise CliFailure(str(exc)) from None
    except (TypeError, ValueError) as exc:  # the arguments do not fit: nothing changed
        raise click.UsageError(str(exc)) from None


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
    @click.option("--args", "args_json", metavar="JSON",
                  help="Edit and retry one job: its new positional arguments (a JSON array).")
    @click.option("--kwargs", "kwargs_json", metavar="JSON",
                  help="Edit and retry one job: its new keyword arguments (a JSON object).")
    @json_option
    @common_options
    def jobs_retry(job_ids: tuple[int, ...], states: tuple[str, ...], queue: str | None,
                   task_name: str | None, limit: int, yes: bool, args_json: str | None,
                   kwargs_json: str | None, as_json: bool, app_path: str | None,
                   url: str | None) -> None:
        """Put jobs back in their queue now, with one more attempt: the jobs with the
        ids given, or every job matching --state/--queue/--task (after a confirmation).
        With --args/--kwargs, one job runs again with new arguments (edit and retry).
        """
        if not job_ids and not (states or queue or task_name):
            raise click.UsageError("give job ids, or filters (--state, --queue, --task)")
        editing = args_json is not None or kwargs_json is not None
        if editing and (len(job_ids) != 1 or states or queue or task_name):
            raise click.UsageError("--args/--kwargs edit one job: give exactly one ID "
                                   "and no --state/--queue/--task")
        app = open_app(app_path, url)
        if editing:
            job = edit_and_retry(app, job_ids[0], args_json, kwargs_json)
            show_jobs([job], as_json=as_json, single=True)
            return
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
