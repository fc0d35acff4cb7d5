"""The ``conveyor`` command line: run workers, migrate, enqueue and inspect jobs.

Every command takes ``--app module:attribute`` (or ``$CONVEYOR_APP``) and ``--url``
(or ``$CONVEYOR_URL``). Failures map to the documented exit codes in ``EXIT_CODES``
and print one line on stderr, never a traceback (set ``CONVEYOR_DEBUG=1`` for one).
"""

from __future__ import annotations

import asyncio
import os
import sys
import traceback
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn, TypeVar

import click

from . import __version__, _cli_jobs, _cli_worker
from ._app import Conveyor
from ._cli_bench import bench
from ._cli_worker import check_url, open_app, resolve_url
from ._errors import DatabaseUnavailableError, InvalidStateError, JobNotFoundError, SchemaError

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 2
EXIT_DB_UNAVAILABLE = 3
EXIT_SCHEMA = 4
EXIT_INTERRUPTED = 130

#: The documented exit codes of every ``conveyor`` command.
EXIT_CODES: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_RUNTIME: "runtime error (job not found, job in the wrong state, ...)",
    EXIT_USAGE: "usage or import error (bad option, bad APP_PATH, bad JSON)",
    EXIT_DB_UNAVAILABLE: "database unreachable or bad database URL",
    EXIT_SCHEMA: "schema not migrated / migrations pending (run `conveyor migrate`)",
}

EPILOG = "\b\nExit codes:\n" + "\n".join(f"  {code}  {text}" for code, text in EXIT_CODES.items())


class CliFailure(click.ClickException):
    """A failure with a documented exit code; click prints ``Error: <message>``."""

    exit_code = EXIT_RUNTIME

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))  # one line, whatever the driver said


class DatabaseUnavailableFailure(CliFailure):
    exit_code = EXIT_DB_UNAVAILABLE


class SchemaFailure(CliFailure):
    exit_code = EXIT_SCHEMA


def classify(exc: BaseException) -> CliFailure:
    """Map an exception escaping a command to its exit code and one-line message."""
    if isinstance(exc, DatabaseUnavailableError) or _is_driver_connection_error(exc):
        return DatabaseUnavailableFailure(f"database unavailable: {exc}")
    if isinstance(exc, SchemaError):
        return SchemaFailure(f"schema not ready: {exc}")
    if isinstance(exc, JobNotFoundError | InvalidStateError):
        return CliFailure(str(exc))
    return CliFailure(f"{type(exc).__name__}: {exc}")


def _is_driver_connection_error(exc: BaseException) -> bool:
    """A driver's own connection error that escaped the storage's translation."""
    try:
        import psycopg
    except ImportError:  # pragma: no cover - psycopg is a hard dependency
        return False
    return isinstance(exc, psycopg.OperationalError)


class ConveyorGroup(click.Group):
    """The root group: every command's exceptions become documented exit codes."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)
        except Exception as exc:
            if os.environ.get("CONVEYOR_DEBUG"):
                traceback.print_exc()
            raise classify(exc) from None


def run_async(app: Conveyor, work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work`` on a fresh event loop, then close the app's connections."""

    async def main() -> T:
        try:
            return await work()
        finally:
            await app.close_async()

    return asyncio.run(main())


def common_options(fn: F) -> F:
    """--app and --url, shared by every command."""
    fn = click.option(
        "--url", metavar="URL",
        help="Database URL. Default: the app's URL with --app, else $CONVEYOR_URL, "
        "else sqlite:///conveyor.db.",
    )(fn)
    return click.option(
        "--app", "app_path", envvar="CONVEYOR_APP", metavar="MODULE:ATTR",
        help="Your Conveyor app, e.g. myproject.jobs:app. Env: CONVEYOR_APP.",
    )(fn)


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")(fn)


# -- commands -----------------------------------------------------------------------------

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(cls=ConveyorGroup, context_settings=CONTEXT, epilog=EPILOG)
@click.version_option(__version__, prog_name="conveyor")
def cli() -> None:
    """Conveyor: a durable background job queue (SQLite embedded, PostgreSQL to scale out).

    Try `conveyor demo`, then `conveyor jobs list`.
    """


@cli.command(epilog=EPILOG)
@click.option("--dry-run", is_flag=True, help="List pending migrations; exit 4 if any.")
@click.option("--show-sql", is_flag=True,
              help="Print the SQL of pending migrations without applying them "
              "(all migrations when the database is unreachable).")
@json_option
@common_options
def migrate(dry_run: bool, show_sql: bool, as_json: bool, app_path: str | None,
            url: str | None) -> None:
    """Apply pending schema migrations (PostgreSQL needs this once per upgrade)."""
    target = resolve_url(app_path, url)
    app = check_url(target)
    pending = _cli_jobs.migrate(app, target, dry_run=dry_run, show_sql=show_sql,
                                as_json=as_json)
    if pending and dry_run:
        sys.exit(EXIT_SCHEMA)


@cli.command(epilog=EPILOG)
@click.argument("task_name", metavar="TASK")
@click.option("--args", "args_json", default="[]", show_default=True, metavar="JSON",
              help="Positional arguments, a JSON array.")
@click.option("--kwargs", "kwargs_json", default="{}", show_default=True, metavar="JSON",
              help="Keyword arguments, a JSON object.")
@click.option("--queue", help="Queue (default: the task's queue, else 'default').")
@click.option("--priority", type=int, help="Higher runs first (-32768..32767).")
@click.option("--delay", type=click.FloatRange(min=0), help="Run after this many seconds.")
@click.option("--max-attempts", type=click.IntRange(min=1), help="Attempts before discard.")
@json_option
@common_options
def enqueue(task_name: str, args_json: str, kwargs_json: str, queue: str | None,
            priority: int | None, delay: float | None, max_attempts: int | None,
            as_json: bool, app_path: str | None, url: str | None) -> None:
    """Enqueue one job of TASK and print it.

    With --app, TASK must be one of the app's tasks and its arguments are checked
    against the function's signature.
    """
    args, kwargs = _cli_jobs.parse_arguments(args_json, kwargs_json)
    app = open_app(app_path, url)
    options = _cli_jobs.EnqueueRequest(queue, priority, delay, max_attempts)
    job = run_async(app, lambda: _cli_jobs.enqueue(app, task_name, args, kwargs, options,
                                                   known=bool(app_path)))
    _cli_jobs.show_jobs([job], as_json=as_json, single=True)


@cli.group(context_settings=CONTEXT, epilog=EPILOG)
def jobs() -> None:
    """Inspect and manage jobs: list, show, retry, cancel."""


@jobs.command("list", epilog=EPILOG)
@click.option("--state", type=click.Choice(_cli_jobs.STATES), help="Only jobs in this state.")
@click.option("--queue", help="Only jobs of this queue.")
@click.option("--task", "task_name", help="Only jobs of this task.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@json_option
@common_options
def jobs_list(state: str | None, queue: str | None, task_name: str | None, limit: int,
              as_json: bool, app_path: str | None, url: str | None) -> None:
    """List jobs, newest first."""
    app = open_app(app_path, url)
    found = run_async(app, lambda: _cli_jobs.list_jobs(app, state, queue, task_name, limit))
    _cli_jobs.show_jobs(found, as_json=as_json)


@jobs.command("show", epilog=EPILOG)
@click.argument("job_id", metavar="ID", type=click.IntRange(min=1))
@json_option
@common_options
def jobs_show(job_id: int, as_json: bool, app_path: str | None, url: str | None) -> None:
    """Show every field of one job, with each attempt's error and traceback."""
    app = open_app(app_path, url)
    job = run_async(app, lambda: app.get_job_async(job_id))
    if job is None:
        raise CliFailure(f"no job with id {job_id}")
    _cli_jobs.show_detail(job, as_json=as_json)


@jobs.command("retry", epilog=EPILOG)
@click.argument("job_id", metavar="ID", type=click.IntRange(min=1))
@json_option
@common_options
def jobs_retry(job_id: int, as_json: bool, app_path: str | None, url: str | None) -> None:
    """Put a finished or waiting job back in its queue now, with one more attempt."""
    app = open_app(app_path, url)
    job = run_async(app, lambda: app.retry_job_async(job_id))
    _cli_jobs.show_jobs([job], as_json=as_json, single=True)


@jobs.command("cancel", epilog=EPILOG)
@click.argument("job_id", metavar="ID", type=click.IntRange(min=1))
@json_option
@common_options
def jobs_cancel(job_id: int, as_json: bool, app_path: str | None, url: str | None) -> None:
    """Cancel a job: at once if queued; a running job is stopped by its worker."""
    app = open_app(app_path, url)
    job = run_async(app, lambda: app.cancel_job_async(job_id))
    _cli_jobs.show_jobs([job], as_json=as_json, single=True)


@cli.command(epilog=EPILOG)
@click.argument("app_arg", metavar="[APP_PATH]", required=False)
@click.option("-q", "--queues", "queue_specs", multiple=True, metavar="Q[:N],...",
              help="Queues to work, comma-separated, each with an optional :concurrency "
              "(e.g. default,mail:5). Default: default.")
@click.option("-c", "--concurrency", type=click.IntRange(min=1), default=10, show_default=True,
              help="Concurrency of queues given without :N.")
@click.option("--processes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Run N worker processes under a supervisor.")
@click.option("--burst", is_flag=True, help="Exit once the queues are empty.")
@click.option("--shutdown-timeout", type=click.FloatRange(min=0), default=30.0,
              show_default=True, help="Seconds running jobs get to finish on shutdown.")
@click.option("--lease-ttl", type=click.FloatRange(min=0, min_open=True), default=30.0,
              show_default=True, help="Seconds a claimed job stays ours without a heartbeat.")
@click.option("--heartbeat-interval", type=click.FloatRange(min=0, min_open=True), default=2.0,
              show_default=True, help="Seconds between lease heartbeats.")
@click.option("--leader-ttl", type=click.FloatRange(min=0, min_open=True), default=15.0,
              show_default=True, help="Seconds of the leader lease; a dead leader is replaced "
              "within it.")
@click.option("--completed-retention", type=click.FloatRange(min=0), default=86_400.0,
              show_default=True, help="Seconds completed and cancelled jobs are kept before "
              "the leader's pruner deletes them.")
@click.option("--discarded-retention", type=click.FloatRange(min=0), default=7 * 86_400.0,
              show_default=True, help="Seconds discarded jobs are kept before they are pruned.")
@click.option("--log-level", type=click.Choice(_cli_worker.LOG_LEVELS, case_sensitive=False),
              default="INFO", show_default=True)
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="json: one JSON object per line.")
@common_options
def worker(app_arg: str | None, queue_specs: tuple[str, ...], concurrency: int,
           processes: int, burst: bool, shutdown_timeout: float, lease_ttl: float,
           heartbeat_interval: float, leader_ttl: float, completed_retention: float,
           discarded_retention: float, log_level: str, log_format: str,
           app_path: str | None, url: str | None) -> None:
    """Run a worker for the app at APP_PATH (module:attribute, or $CONVEYOR_APP).

    SIGTERM or Ctrl-C stops fetching and lets running jobs finish (up to
    --shutdown-timeout); a second Ctrl-C or SIGTERM exits at once.
    """
    app_path = app_arg or app_path
    if not app_path:
        raise click.UsageError("missing APP_PATH (module:attribute), or set $CONVEYOR_APP")
    opts = _cli_worker.WorkerOptions(
        queues=_cli_worker.parse_queues(queue_specs, concurrency), concurrency=concurrency,
        burst=burst, shutdown_timeout=shutdown_timeout, lease_ttl=lease_ttl,
        heartbeat_interval=heartbeat_interval, leader_ttl=leader_ttl,
        completed_retention=completed_retention, discarded_retention=discarded_retention,
        log_level=log_level.upper(),
        log_format=log_format,
    )
    config = _cli_worker.build_config(opts)
    if processes > 1:
        open_app(app_path, url)  # fail once here, not once per child
        sys.exit(_cli_worker.supervise(_cli_worker.child_argv(app_path, url, opts), processes))
    _cli_worker.configure_logging(opts.log_level, opts.log_format)
    app = open_app(app_path, url)
    run_async(app, lambda: app.run_worker(config=config))
    _cli_worker.exit_if_handlers_linger()


@cli.command(epilog=EPILOG)
@click.option("--jobs", "total", type=click.IntRange(10, 100_000), default=3000,
              show_default=True, help="How many jobs to enqueue.")
@common_options
def demo(total: int, app_path: str | None, url: str | None) -> None:
    """Enqueue a few thousand demo jobs on a fresh ./conveyor.db and run them live.

    Afterwards, `conveyor jobs list` shows what happened.
    """
    from . import _demo

    target = resolve_url(app_path, url)
    check_url(target)
    sys.exit(_demo.run_demo(target, total))


cli.add_command(bench)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console-script entry point (``conveyor``), also ``python -m conveyor``."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="conveyor")
    sys.exit(EXIT_OK)  # pragma: no cover - click's standalone mode always exits


__all__ = ["EXIT_CODES", "cli", "main"]


from . import _cli_flow, _cli_web  # noqa: E402  (they build on the helpers above)

_cli_flow.register(cli, jobs)
_cli_web.register(cli)
