"""``conveyor worker``: run a worker, or N of them under a supervisor.

Every ``WorkerConfig`` setting is a flag (``lease_ttl`` -> ``--lease-ttl``), generated
from the dataclass fields: a new setting gets its flag, default and help (the field's
``metadata["help"]``) without touching this file.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import sys
import typing
from collections.abc import Callable, Sequence
from typing import Any

import click

from .. import _payload
from .._app import Conveyor
from .._config import WorkerConfig, labels_from_env, parse_labels, parse_queue_specs
from .._routing import check_task_filter
from ._base import EPILOG, PROCESS, common_options, run_async
from ._loading import open_app
from ._logging import LOG_LEVELS, configure_logging
from ._supervisor import RECYCLE_EXIT, exit_if_handlers_linger, follow_supervisor, supervise

#: WorkerConfig fields with their own hand-written options (-q/-c, --burst, --label,
#: --tasks).
NOT_FLAGS = frozenset({"queues", "burst", "labels", "tasks", "max_memory_per_child"})

#: Options that make the worker process recycle itself: they need the supervisor.
RECYCLING = ("max_jobs_per_child", "max_memory_per_child", "hard_timeout_grace")
_UNITS = {"b": 1, "kb": 1024, "mb": 1024**2, "gb": 1024**3}


class Size(click.ParamType[int]):
    """A memory size: a number and a unit, ``512MB``, ``1.5GB``, ``300000KB`` (binary:
    1 MB = 1024 KB); the unit is required, a bare number is an error."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip().lower().replace(" ", "")
        number = text.rstrip("kmgb")
        unit = text[len(number):]
        try:
            size = int(float(number) * _UNITS[unit])
        except (KeyError, ValueError):
            self.fail(f"{value!r} is not a size: give a number and KB, MB or GB (e.g. 512MB)",
                      param, ctx)
        if size < 1024**2:
            self.fail(f"{value!r} is below 1MB: no worker process fits in it", param, ctx)
        return size


def config_fields() -> list[dataclasses.Field[Any]]:
    """The WorkerConfig fields that become flags, in declaration order."""
    return [f for f in dataclasses.fields(WorkerConfig) if f.name not in NOT_FLAGS]


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _param_type(name: str, kind: Any) -> click.FloatRange | click.IntRange:
    """Seconds are floats; timeouts, retentions and delays (archive_after) may be 0, other
    durations not. Counts are at least 1, except a bound where 0 turns a service off
    (vacuum_dead_rows)."""
    if kind is float:
        if name.endswith(("_retention", "_timeout", "_after")):
            return click.FloatRange(min=0)
        return click.FloatRange(min=0, min_open=True)
    return click.IntRange(min=0 if name == "vacuum_dead_rows" else 1)


def config_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """One option per WorkerConfig field, named, typed and documented after it."""
    hints = typing.get_type_hints(WorkerConfig)
    for f in reversed(config_fields()):
        kind = hints[f.name]
        base = next((t for t in typing.get_args(kind) if t is not type(None)), kind)
        text = f.metadata["help"]
        help_text = text[:1].upper() + text[1:] + "."
        fn = click.option(_flag(f.name), f.name, type=_param_type(f.name, base),
                          default=f.default, show_default=f.default is not None,
                          help=help_text)(fn)
    return fn


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerOptions:
    """The worker command's options, parsed; children of a supervisor get the same."""

    queues: dict[str, int]
    concurrency: int = 10
    burst: bool = False
    #: WorkerConfig field -> value, for every generated flag.
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    log_level: str = "INFO"
    log_format: str = "text"
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    #: --tasks: only jobs of these tasks are claimed; None: every task.
    tasks: tuple[str, ...] | None = None
    #: --max-memory-per-child in bytes; None: no bound.
    max_memory: int | None = None


def parse_queues(specs: Sequence[str], concurrency: int,
                 app_names: Sequence[str] = ()) -> dict[str, int]:
    """``("default,mail:5",)`` -> ``{"default": concurrency, "mail": 5}``; ``*`` stands
    for ``app_names`` (every queue the app names)."""
    text = ",".join(specs)
    if not text.replace(",", "").strip():
        return {"default": concurrency}
    try:
        return parse_queue_specs(text, concurrency, "-q", app_names)
    except ValueError as exc:
        raise click.BadParameter(str(exc).removeprefix("-q: "), param_hint="-q") from None


def choose_queues(app: Conveyor, queue_specs: Sequence[str], concurrency: int,
                  all_queues: bool) -> dict[str, int]:
    """-q if given, else --all-queues, else $CONVEYOR_QUEUES, else every queue the app
    names (``default`` included)."""
    every = list(app_queues(app, concurrency))
    if all_queues:
        if queue_specs:
            raise click.UsageError("give -q or --all-queues, not both (-q '*,mail:5' "
                                   "serves every queue and sets mail's concurrency)")
        return app_queues(app, concurrency)
    if queue_specs:
        return parse_queues(queue_specs, concurrency, every)
    env = os.environ.get("CONVEYOR_QUEUES", "")
    if env.strip():
        try:
            return parse_queue_specs(env, concurrency, "CONVEYOR_QUEUES", every)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
    return app_queues(app, concurrency)


def worker_labels(flags: Sequence[str]) -> dict[str, str]:
    """$CONVEYOR_WORKER_LABELS, then every --label over it."""
    try:
        return {**labels_from_env(), **parse_labels(flags)}
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def worker_tasks(app: Conveyor, specs: Sequence[str]) -> tuple[str, ...] | None:
    """--tasks send_email,resize (repeatable): each a task the app knows, or a usage
    error that lists the ones it does."""
    if not specs:
        return None
    try:
        return check_task_filter(",".join(specs), app.tasks)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--tasks") from None


def app_queues(app: Conveyor, concurrency: int) -> dict[str, int]:
    """What a worker started without -q serves: ``default`` and every queue the app's
    tasks and schedules name (the same rule as ``app.run_worker()`` without queues)."""
    named = {task.defaults.queue for task in app.tasks.values()}
    named |= {app.tasks[s.task].defaults.queue for s in app.schedules.values()
              if s.task in app.tasks}
    return {name: concurrency for name in ["default", *sorted(named - {"default"})]}


def build_config(opts: WorkerOptions) -> WorkerConfig:
    """The WorkerConfig; its validation errors are usage errors (exit 2)."""
    try:
        for name in opts.queues:
            _payload.check_queue_name(name)
        return WorkerConfig(queues=dict(opts.queues), burst=opts.burst, labels=opts.labels,
                            tasks=opts.tasks, max_memory_per_child=opts.max_memory,
                            **opts.settings)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def child_argv(app_path: str, url: str | None, opts: WorkerOptions) -> list[str]:
    """The command line of one child worker: same options, one process."""
    queues = ",".join(f"{name}:{limit}" for name, limit in opts.queues.items())
    argv = [sys.executable, "-m", "conveyor", "worker", app_path, "--queues", queues,
            "--concurrency", str(opts.concurrency)]
    for name, value in opts.settings.items():
        if value is not None:
            argv += [_flag(name), repr(value)]
    if opts.max_memory is not None:
        argv += ["--max-memory-per-child", f"{opts.max_memory}B"]
    argv += ["--log-level", opts.log_level, "--log-format", opts.log_format,
             "--processes", "1", "--supervised-child"]
    if opts.burst:
        argv.append("--burst")
    for key, value in opts.labels.items():
        argv += ["--label", f"{key}={value}"]
    if opts.tasks is not None:
        argv += ["--tasks", ",".join(opts.tasks)]
    if url:
        argv += ["--url", url]
    return argv


#: Allocations between young collections in a worker process (CPython's default: 700).
GC_YOUNG_THRESHOLD = 10_000


def tune_gc() -> None:
    """Tune the cyclic collector for this process, which the CLI owns (an app that
    embeds a worker keeps its own settings): everything loaded so far (the app, its
    imports) is frozen out of every collection, and young collections run every
    ``GC_YOUNG_THRESHOLD`` allocations, not 700. A job makes a few dozen short-lived
    objects that reference counting frees; collecting them in a cycle search every 700
    allocations, with full passes over the app's whole heap, cost 8-10% of a worker's
    CPU. ``$CONVEYOR_GC_DEFAULTS=1`` leaves CPython's settings as they are."""
    if not PROCESS["owned"] or os.environ.get("CONVEYOR_GC_DEFAULTS") == "1":
        return
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


@click.command(epilog=EPILOG)
@click.argument("app_arg", metavar="[APP_PATH]", required=False)
@click.option("-q", "--queues", "queue_specs", multiple=True, metavar="Q[:N],...",
              help="Queues to work, comma-separated, each with an optional :concurrency "
              "(e.g. default,mail:5); '*' is every queue the app names. Default: "
              "$CONVEYOR_QUEUES (e.g. default=10,emails=5), else default and every queue "
              "the app's tasks and schedules name.")
@click.option("--all-queues", is_flag=True,
              help="Serve default and every queue the app's tasks and schedules name "
              "(even when $CONVEYOR_QUEUES is set).")
@click.option("--label", "label_specs", multiple=True, metavar="KEY=VALUE",
              help="A label of this worker, shown with its node in conveyor status, the "
              "dashboard and explain; jobs that require labels (requires=) run only on "
              "workers that have them (repeatable; added to $CONVEYOR_WORKER_LABELS, "
              "e.g. region=eu,tier=gold).")
@click.option("--tasks", "task_specs", multiple=True, metavar="TASK,...",
              help="Claim only jobs of these tasks (comma-separated, repeatable); the "
              "others stay for other workers. Default: every task.")
@click.option("-c", "--concurrency", type=click.IntRange(min=1), default=10, show_default=True,
              help="Concurrency of queues given without :N.")
@click.option("--processes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Run N worker processes under a supervisor, which replaces a child "
              "that dies (backing off when they die right after starting) or asks to be "
              "recycled (--max-jobs-per-child, --max-memory-per-child, "
              "--hard-timeout-grace: these run even one process under the supervisor).")
@click.option("--max-memory-per-child", "max_memory", type=Size(), default=None,
              metavar="SIZE", help="Resident memory (e.g. 512MB, 2GB) after which a worker "
              "process stops claiming, drains and is replaced; checked every 2 s.")
@click.option("--supervised-child", is_flag=True, hidden=True)
@click.option("--burst", is_flag=True, help="Exit once the queues are empty.")
@config_options
@click.option("--log-level", type=click.Choice(LOG_LEVELS, case_sensitive=False),
              default="INFO", show_default=True)
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="json: one JSON object per line.")
@common_options
def worker(app_arg: str | None, queue_specs: tuple[str, ...], all_queues: bool,
           label_specs: tuple[str, ...], task_specs: tuple[str, ...], concurrency: int,
           processes: int, max_memory: int | None, supervised_child: bool, burst: bool,
           log_level: str, log_format: str, app_path: str | None, url: str | None,
           **settings: Any) -> None:
    """Run a worker for the app at APP_PATH (module:attribute, or $CONVEYOR_APP).

    SIGTERM or Ctrl-C stops fetching and lets running jobs finish (up to
    --shutdown-timeout); a second Ctrl-C or SIGTERM exits at once.

    The worker records its labels and the app's version (Conveyor(version=...) or
    $CONVEYOR_APP_VERSION) with its node.
    """
    app_path = app_arg or app_path
    if not app_path:
        raise click.UsageError("missing APP_PATH (module:attribute), or set $CONVEYOR_APP")
    labels = worker_labels(label_specs)
    app = open_app(app_path, url)  # fails once here, not once per child
    queues = choose_queues(app, queue_specs, concurrency, all_queues)
    opts = WorkerOptions(
        queues=queues, concurrency=concurrency, burst=burst,
        settings=settings, log_level=log_level.upper(), log_format=log_format, labels=labels,
        tasks=worker_tasks(app, task_specs), max_memory=max_memory,
    )
    config = build_config(opts)
    configure_logging(opts.log_level, opts.log_format)
    recycles = max_memory is not None or any(settings.get(name) for name in RECYCLING)
    if processes > 1 or (recycles and not supervised_child):
        sys.exit(supervise(child_argv(app_path, url, opts), processes,
                           watchdog=bool(settings.get("hard_timeout_grace"))))
    if supervised_child:
        follow_supervisor()
    tune_gc()
    recycled = run_async(app, lambda: app.run_worker(config.queues, config=config))
    code = RECYCLE_EXIT if recycled else 0
    # a hard time limit ends the stuck thread now: its jobs were given back already
    hard = bool(recycled and recycled.startswith("hard"))
    exit_if_handlers_linger(0.0 if hard else 0.5, code=code)
    sys.exit(code)
