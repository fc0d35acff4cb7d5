"""``conveyor enqueue``: one job of a task, from JSON arguments."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import click

from .._app import Conveyor
from .._app.named import task_by_name
from .._config import parse_labels
from .._job import Job
from ._base import EPILOG, common_options, json_option, run_async
from ._loading import open_app
from .jobs import show_jobs


@dataclasses.dataclass(frozen=True, slots=True)
class EnqueueRequest:
    queue: str | None = None
    priority: int | None = None
    delay: float | None = None
    max_attempts: int | None = None
    #: Worker labels the job requires instead of the task's (``--requires gpu=a100``).
    requires: dict[str, str] | None = None


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


async def enqueue_job(
    app: Conveyor,
    task_name: str,
    args: list[Any],
    kwargs: dict[str, Any],
    request: EnqueueRequest,
    *,
    known: bool,
) -> Job:
    """Enqueue through the task API; with ``known`` the task must be one of the app's
    (``task_by_name``: the rule the HTTP API follows too)."""
    try:
        task = task_by_name(app, task_name, known=known)
    except ValueError as exc:  # unknown to the app, or not a valid name
        raise click.BadParameter(str(exc), param_hint="TASK") from None
    try:
        with_options = task.options(
            queue=request.queue, priority=request.priority, delay=request.delay,
            max_attempts=request.max_attempts, requires=request.requires,
        )
        return await with_options.enqueue_async(*args, **kwargs)
    except (TypeError, ValueError) as exc:  # bad arguments, payload too large, bad queue
        raise click.UsageError(str(exc)) from None


@click.command(epilog=EPILOG)
@click.argument("task_name", metavar="TASK")
@click.option("--args", "args_json", default="[]", show_default=True, metavar="JSON",
              help="Positional arguments, a JSON array.")
@click.option("--kwargs", "kwargs_json", default="{}", show_default=True, metavar="JSON",
              help="Keyword arguments, a JSON object.")
@click.option("--queue", help="Queue (default: the task's queue, else 'default').")
@click.option("--priority", type=int, help="Higher runs first (-32768..32767).")
@click.option("--delay", type=click.FloatRange(min=0), help="Run after this many seconds.")
@click.option("--max-attempts", type=click.IntRange(min=1), help="Attempts before discard.")
@click.option("--requires", "requires_specs", multiple=True, metavar="KEY=VALUE",
              help="A worker label the job requires (repeatable): only workers started "
              "with it run the job (default: the task's own requirement).")
@json_option
@common_options
def enqueue(task_name: str, args_json: str, kwargs_json: str, queue: str | None,
            priority: int | None, delay: float | None, max_attempts: int | None,
            requires_specs: tuple[str, ...], as_json: bool, app_path: str | None,
            url: str | None) -> None:
    """Enqueue one job of TASK and print it.

    With --app, TASK must be one of the app's tasks and its arguments are checked
    against the function's signature.
    """
    args, kwargs = parse_arguments(args_json, kwargs_json)
    try:
        requires = parse_labels(requires_specs, "--requires") if requires_specs else None
    except ValueError as exc:
        raise click.BadParameter(str(exc).removeprefix("--requires: "),
                                 param_hint="--requires") from None
    app = open_app(app_path, url)
    options = EnqueueRequest(queue, priority, delay, max_attempts, requires)
    job = run_async(app, lambda: enqueue_job(app, task_name, args, kwargs, options,
                                                   known=bool(app_path)))
    show_jobs([job], as_json=as_json, single=True)
