"""What every command shares: exit codes, the error mapping, the shared options, and
running a command's work on a fresh event loop.

Failures map to the documented exit codes in ``EXIT_CODES`` and print one line on
stderr, never a traceback (set ``CONVEYOR_DEBUG=1`` for one).
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from .._errors import DatabaseUnavailableError, InvalidStateError, JobNotFoundError, SchemaError
from .._job import MAX_ID

if TYPE_CHECKING:
    from .._app import Conveyor

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

#: Set by ``main()`` (the ``conveyor`` command, ``python -m conveyor``): the process is
#: the CLI's own, so a command may tune it (the worker's garbage collector); a test
#: that invokes a command in its own process leaves this False.
PROCESS: dict[str, bool] = {"owned": False}

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 2
EXIT_DB_UNAVAILABLE = 3
EXIT_SCHEMA = 4
EXIT_INTERRUPTED = 130

#: The largest id (and count) a database column holds: a bigger integer is a usage
#: error, not an OverflowError from the driver.
#: A job id on the command line.
JOB_ID = click.IntRange(1, MAX_ID)

#: The documented exit codes of every ``conveyor`` command.
EXIT_CODES: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_RUNTIME: "runtime error (job not found, job in the wrong state, ...)",
    EXIT_USAGE: "usage or import error (bad option, bad APP_PATH, bad JSON, dashboard port in use)",
    EXIT_DB_UNAVAILABLE: "database unreachable or bad database URL",
    EXIT_SCHEMA: "schema not migrated / migrations pending (run `conveyor migrate`)",
}

EPILOG = "\b\nExit codes:\n" + "\n".join(f"  {code}  {text}" for code, text in EXIT_CODES.items())
CONTEXT: dict[str, Any] = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class CliFailure(click.ClickException):
    """A failure with a documented exit code; click prints ``Error: <message>``."""

    exit_code = EXIT_RUNTIME

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))  # one line, whatever the driver said


class UsageFailure(CliFailure):
    """A usage error in one line (click's UsageError also prints the usage)."""

    exit_code = EXIT_USAGE


class DatabaseUnavailableFailure(CliFailure):
    exit_code = EXIT_DB_UNAVAILABLE


class SchemaFailure(CliFailure):
    exit_code = EXIT_SCHEMA


def classify(exc: BaseException) -> CliFailure:
    """Map an exception escaping a command to its exit code and one-line message (the
    storage turns every lost or refused connection into DatabaseUnavailableError)."""
    if isinstance(exc, DatabaseUnavailableError):
        return DatabaseUnavailableFailure(f"database unavailable: {exc}")
    if isinstance(exc, SchemaError):
        return SchemaFailure(f"schema not ready: {exc}")
    if isinstance(exc, JobNotFoundError | InvalidStateError):
        return CliFailure(str(exc))
    if isinstance(exc, OverflowError):  # an integer the database cannot hold
        return UsageFailure(f"number out of range: {exc}")
    return CliFailure(f"{type(exc).__name__}: {exc}")


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
    import asyncio  # here: `conveyor --help` and `--version` never start a loop


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
