"""``conveyor queues``: see and control queues on every worker.

An action on a queue that nothing names (no task of the app, no schedule, no job, no
live worker, no setting) is refused with the close names, a typo being likelier than
a queue of the future; ``--force`` acts anyway.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

import click
from rich import box
from rich.table import Table
from rich.text import Text

from .._app import Conveyor, QueueInfo
from .._format import seconds
from .._task_retry import parse_queue_backoff
from ._base import CONTEXT, EPILOG, UsageFailure, common_options, json_option, run_async
from ._loading import open_app
from ._render import console, plain, print_json, safe


def _queues_table(queues: list[QueueInfo]) -> Table:
    table = Table(box=box.SIMPLE_HEAVY, title="Queues")
    for header in ("queue", "paused", "concurrency", "rate limit", "backoff", "retention",
                   "nodes", "available", "running", "scheduled", "retryable", "discarded"):
        table.add_column(header)
    for q in queues:
        limit = "per worker" if q.concurrency is None else f"{q.concurrency} ({q.scope})"
        table.add_row(plain(q.name), Text("paused", style="red") if q.paused else Text("no"),
                      limit, plain(q.rate_limit or "-"), plain(q.backoff or "-"),
                      _retention(q), str(len(q.nodes)),
                      *(str(q.counts.get(s, 0)) for s in
                        ("available", "running", "scheduled", "retryable", "discarded")))
    return table


def _retention(q: QueueInfo) -> str:
    """completed / discarded retention of the queue, "-" when it has none of its own."""
    if q.completed_retention is None and q.discarded_retention is None:
        return "-"

    def one(value: float | None) -> str:
        return "workers'" if value is None else seconds(value)
    return f"{one(q.completed_retention)} / {one(q.discarded_retention)}"


def _doc(value: Any) -> Any:
    return dataclasses.asdict(value)


@click.group(context_settings=CONTEXT, epilog=EPILOG)
def queues() -> None:
    """See and control queues on every worker: list, pause, resume, scale, rate,
    backoff, retention, fair-keys, fair-weight."""

@queues.command("list", epilog=EPILOG)
@json_option
@common_options
def queues_list(as_json: bool, app_path: str | None, url: str | None) -> None:
    """Queues with their live settings, serving nodes and jobs per state."""
    app = open_app(app_path, url)
    found = run_async(app, app.list_queues_async)
    if as_json:
        print_json([_doc(q) for q in found])
    else:
        console().print(_queues_table(found))

async def known_queues(app: Conveyor) -> set[str]:
    """Every queue something names: the app's tasks and schedules, and the database's
    jobs, live nodes and queue settings."""
    names = {q.name for q in await app.list_queues_async()}
    names |= {task.defaults.queue for task in app.tasks.values()}
    schedules = await app.list_schedules_async()
    names |= {app.tasks[s.row.task].defaults.queue for s in schedules if s.row.task in app.tasks}
    return names


def refuse_unknown(name: str, known: set[str]) -> None:
    if name in known:
        return
    close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise UsageFailure(f"no task, schedule, job or worker names queue {safe(name)!r}; "
                       f"{hint}(--force to act on it anyway)")


def _queue_action(name: str, app_path: str | None, url: str | None, verb: str,
                  action: Any, force: bool = False) -> None:
    app = open_app(app_path, url)

    async def act() -> None:
        if not force:
            refuse_unknown(name, await known_queues(app))
        await action(app)

    run_async(app, act)
    click.echo(f"queue {safe(name)}: {verb} (every worker applies it within about a second)")


def force_option(fn: Any) -> Any:
    return click.option("--force", is_flag=True,
                        help="Act even on a queue that no task, job or worker names.")(fn)

@queues.command("pause", epilog=EPILOG)
@click.argument("name")
@force_option
@common_options
def queues_pause(name: str, force: bool, app_path: str | None, url: str | None) -> None:
    """Stop starting jobs of queue NAME on every worker."""
    _queue_action(name, app_path, url, "paused", lambda a: a.pause_queue_async(name), force)

@queues.command("resume", epilog=EPILOG)
@click.argument("name")
@force_option
@common_options
def queues_resume(name: str, force: bool, app_path: str | None, url: str | None) -> None:
    """Start jobs of queue NAME again."""
    _queue_action(name, app_path, url, "resumed", lambda a: a.resume_queue_async(name), force)

@queues.command("scale", epilog=EPILOG)
@click.argument("name")
@click.argument("concurrency", required=False, type=click.IntRange(1, 1_000_000))
@click.option("--per-node", is_flag=True,
              help="Apply CONCURRENCY on every node instead of splitting it across nodes.")
@click.option("--reset", is_flag=True, help="Back to each worker's own -q/-c setting.")
@force_option
@common_options
def queues_scale(name: str, concurrency: int | None, per_node: bool, reset: bool, force: bool,
                 app_path: str | None, url: str | None) -> None:
    """Set queue NAME's concurrency: a cluster total shared by its nodes (default)."""
    if (concurrency is None) == (not reset):
        raise click.UsageError("give CONCURRENCY or --reset")
    verb = "reset to each worker's setting" if reset else (
        f"concurrency {concurrency} {'per node' if per_node else 'in total'}")
    _queue_action(name, app_path, url, verb,
                  lambda a: a.set_queue_concurrency_async(name, concurrency, per_node=per_node),
                  force)

@queues.command("rate", epilog=EPILOG)
@click.argument("name")
@click.argument("rate", required=False)
@force_option
@common_options
def queues_rate(name: str, rate: str | None, force: bool, app_path: str | None, url: str | None) -> None:
    """Limit how often jobs of queue NAME start, like 100/m; no RATE removes it."""
    _queue_action(name, app_path, url, f"rate limit {rate or 'removed'}",
                  lambda a: a.set_queue_rate_limit_async(name, rate), force)

@queues.command("backoff", epilog=EPILOG)
@click.argument("name")
@click.argument("spec", required=False)
@click.option("--reset", is_flag=True, help="Back to the built-in backoff.")
@force_option
@common_options
def queues_backoff(name: str, spec: str | None, reset: bool, force: bool,
                   app_path: str | None, url: str | None) -> None:
    """Default backoff of queue NAME's failed jobs: SPEC is seconds (30) or
    exp:BASE[:CAP] (exp:5:3600: 5 s, 10 s, 20 s ... up to an hour, with jitter).

    It applies to tasks without a backoff= of their own: a task's own backoff wins,
    then the queue's, then the built-in one. Running workers use it within about
    --settings-interval.
    """
    if (spec is None) == (not reset):
        raise click.UsageError("give SPEC or --reset")
    if spec is not None:
        try:
            spec = parse_queue_backoff(spec).spec
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="SPEC") from None
    _queue_action(name, app_path, url, f"backoff {spec or 'reset to the built-in one'}",
                  lambda a: a.set_queue_backoff_async(name, spec), force)

@queues.command("retention", epilog=EPILOG)
@click.argument("name")
@click.option("--completed", type=click.FloatRange(min=0), default=None,
              help="Seconds completed and cancelled jobs of NAME are kept.")
@click.option("--discarded", type=click.FloatRange(min=0), default=None,
              help="Seconds discarded jobs of NAME are kept.")
@click.option("--reset", is_flag=True,
              help="Back to the pruning worker's --completed/--discarded-retention.")
@force_option
@common_options
def queues_retention(name: str, completed: float | None, discarded: float | None, reset: bool,
                     force: bool, app_path: str | None, url: str | None) -> None:
    """How long finished jobs of queue NAME are kept before the pruner deletes them.

    Overrides the workers' --completed-retention/--discarded-retention for this
    queue; an option not given is left as it is. The leader's pruner applies it at
    its next pass (--prune-interval).
    """
    if reset and (completed is not None or discarded is not None):
        raise click.UsageError("give --completed/--discarded or --reset, not both")
    if not reset and completed is None and discarded is None:
        raise click.UsageError("give --completed and/or --discarded (seconds), or --reset")
    kwargs: dict[str, Any] = ({"completed": None, "discarded": None} if reset else
                              {k: v for k, v in (("completed", completed),
                                                 ("discarded", discarded)) if v is not None})
    verb = "retention reset to the workers' setting" if reset else "retention " + ", ".join(
        f"{k} {seconds(v)}" for k, v in kwargs.items())
    _queue_action(name, app_path, url, verb,
                  lambda a: a.set_queue_retention_async(name, **kwargs), force)

@queues.command("fair-keys", epilog=EPILOG)
@click.argument("name")
@json_option
@common_options
def queues_fair_keys(name: str, as_json: bool, app_path: str | None, url: str | None) -> None:
    """Fair keys of queue NAME: waiting jobs, weight and virtual time of each
    (docs/flow-control.md, "Fair keys")."""
    app = open_app(app_path, url)
    try:
        found = run_async(app, lambda: app.list_fair_keys_async(name))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="NAME") from None
    if as_json:
        print_json([dataclasses.asdict(k) for k in found])
        return
    table = Table(box=box.SIMPLE)
    for column in ("key", "waiting", "weight", "virtual time"):
        table.add_column(column, justify="left" if column == "key" else "right")
    for k in found:
        table.add_row(Text(k.key), f"{k.waiting:,}", f"{k.weight:g}", f"{k.vtime:,.1f}")
    console().print(table if found else plain(f"queue {safe(name)}: no fair keys waiting"))

@queues.command("fair-weight", epilog=EPILOG)
@click.argument("name")
@click.argument("key")
@click.argument("weight", required=False,
                type=click.FloatRange(min=0, min_open=True, max=1000))
@click.option("--reset", is_flag=True, help="Back to weight 1.")
@force_option
@common_options
def queues_fair_weight(name: str, key: str, weight: float | None, reset: bool, force: bool,
                       app_path: str | None, url: str | None) -> None:
    """Give fair key KEY of queue NAME a WEIGHT (above 0, up to 1,000): it takes WEIGHT
    turns for another key's one (docs/flow-control.md, "Fair keys")."""
    if (weight is None) == (not reset):
        raise click.UsageError("give WEIGHT or --reset")
    verb = f"fair key {safe(key)!r} weight {1.0 if weight is None else weight:g}"
    try:
        _queue_action(name, app_path, url, verb,
                      lambda a: a.set_fair_weight_async(name, key, weight), force)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
