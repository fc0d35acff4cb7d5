"""``conveyor schedules``: periodic jobs, listed, paused, resumed, run now or removed.

``remove`` deletes a schedule defined at runtime (``app.add_schedule``). A schedule
defined in code (``@app.periodic``) is refused with ``--app``; without ``--app`` the
CLI cannot know, and a worker of the app declares it again when it starts."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable, Callable
from typing import Any

import click
from rich import box
from rich.table import Table
from rich.text import Text

from .._app import Conveyor, ScheduleInfo
from ._base import CONTEXT, EPILOG, CliFailure, common_options, json_option, run_async
from ._loading import open_app
from ._render import console, print_json, when


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


@click.group(context_settings=CONTEXT, epilog=EPILOG)
def schedules() -> None:
    """Periodic jobs: list, pause, resume, run now, remove."""

@schedules.command("list", epilog=EPILOG)
@json_option
@common_options
def schedules_list(as_json: bool, app_path: str | None, url: str | None) -> None:
    """Schedules with their last and next run."""
    app = open_app(app_path, url)
    found = run_async(app, app.list_schedules_async)
    if as_json:
        print_json([{**_doc(s.row), "next_run": s.next_run, "defined_in_code": s.defined_in_code}
                    for s in found])
    else:
        console().print(_schedules_table(found))


async def _act(app: Conveyor, name: str, verb: str) -> Any:
    actions: dict[str, Callable[[str], Awaitable[Any]]] = {
        "pause": app.pause_schedule_async, "resume": app.resume_schedule_async,
        "run": functools.partial(app.trigger_schedule_async, source="cli"),
        "remove": app.remove_schedule_async}
    action = actions[verb]
    try:
        return await action(name)
    except (ValueError, LookupError) as exc:  # unknown, or defined in code
        raise CliFailure(str(exc)) from None


def _verb_command(verb: str, text: str) -> click.Command:
    """``conveyor schedules VERB NAME``."""

    def command(name: str, app_path: str | None, url: str | None) -> None:
        app = open_app(app_path, url)
        result = run_async(app, lambda: _act(app, name, verb))
        done = f"enqueued job {result.id}" if verb == "run" else f"{verb}d"
        click.echo(f"schedule {name}: {done}")

    command.__doc__ = text
    return click.command(verb, epilog=EPILOG)(common_options(click.argument("name")(command)))


for _verb, _text in (("pause", "Stop enqueuing schedule NAME's ticks."),
                     ("resume", "Enqueue schedule NAME's ticks again."),
                     ("run", "Enqueue schedule NAME's job now, outside its ticks."),
                     ("remove", "Delete schedule NAME, defined at runtime (app.add_schedule); "
                      "one defined in code comes back when a worker of the app starts.")):
    schedules.add_command(_verb_command(_verb, _text))
