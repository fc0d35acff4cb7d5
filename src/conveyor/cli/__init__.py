"""The ``conveyor`` command line: run workers, migrate, enqueue and inspect jobs.

One module per command group; this one only lists them under the root group. A
command's module is imported only when that command runs (or its own ``--help`` is
asked for): ``conveyor --help`` and ``conveyor --version`` read the table below and load
neither the app, nor rich, nor a database driver.
Every command takes ``--app module:attribute`` (or ``$CONVEYOR_APP``) and ``--url``
(or ``$CONVEYOR_URL``). Failures map to the documented exit codes in ``EXIT_CODES``
and print one line on stderr, never a traceback (set ``CONVEYOR_DEBUG=1`` for one).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

import click

from .._version import __version__
from ._base import CONTEXT, EPILOG, EXIT_CODES, EXIT_OK, PROCESS, ConveyorGroup

#: name -> (module under conveyor.cli, attribute, the one-line help ``conveyor --help``
#: shows). tests/test_cli_lazy.py checks each line against the command it names.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "batches": ("batches", "batches",
                "Batches of jobs with callbacks (docs/workflows.md): show one."),
    "bench": ("bench", "bench",
              "Measure enqueue, burn-down and latency on your database (queue 'conveyor-bench')."),
    "check": ("status", "check_cmd",
              "Liveness probe: exit 0 when the database answers and its schema is current "
              "(and enough workers are alive), else 1."),
    "dashboard": ("dashboard", "dashboard_cmd",
                  "Serve the web dashboard (Mission Control), /healthz and /metrics."),
    "demo": ("demo", "demo",
             "Enqueue a few thousand demo jobs on the demo's own database and run them live."),
    "enqueue": ("enqueue", "enqueue", "Enqueue one job of TASK and print it."),
    "jobs": ("jobs", "jobs",
             "Inspect and manage jobs: list, show, retry, cancel, explain, discard, delete, purge."),
    "limiters": ("limiters", "limiters",
                 "Limiters used in handlers and outside jobs (app.limiter): list them and "
                 "their holders."),
    "migrate": ("migrate", "migrate",
                "Apply pending schema migrations (PostgreSQL needs this once per upgrade)."),
    "prune": ("maintenance", "prune", "Delete old finished jobs now, as the pruner does."),
    "queues": ("queues", "queues",
               "See and control queues on every worker: list, pause, resume, scale, rate, "
               "backoff, retention, fair-keys, fair-weight."),
    "rescue": ("maintenance", "rescue", "Rescue jobs whose lease expired now, as the rescuer does."),
    "schedules": ("schedules", "schedules", "Periodic jobs: list, pause, resume, run now, remove."),
    "status": ("status", "status_cmd",
               "A terminal overview: jobs per state, the last hour, queues and workers."),
    "worker": ("worker", "worker",
               "Run a worker for the app at APP_PATH (module:attribute, or $CONVEYOR_APP)."),
    "workflows": ("workflows", "workflows",
                  "Workflows (jobs with dependencies, docs/workflows.md): show one."),
}


class LazyGroup(ConveyorGroup):
    """The root group: commands come from ``COMMANDS``, each module imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in COMMANDS:
            return self.commands.get(cmd_name)
        module_name, attribute, _ = COMMANDS[cmd_name]
        module = importlib.import_module(f"{__name__}.{module_name}")
        command: click.Command = getattr(module, attribute)
        self.commands[cmd_name] = command
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from the table's one-liners, without importing a command."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            if name in COMMANDS:
                text = click.Command(name, help=COMMANDS[name][2]).get_short_help_str(limit)
            else:
                text = self.commands[name].get_short_help_str(limit)
            rows.append((name, text))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings=CONTEXT, epilog=EPILOG)
@click.version_option(__version__, prog_name="conveyor")
def cli() -> None:
    """Conveyor: a durable background job queue (SQLite embedded, PostgreSQL to scale out).

    Try `conveyor demo`, then `conveyor jobs list`.
    """


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console-script entry point (``conveyor``), also ``python -m conveyor``."""
    PROCESS["owned"] = True
    cli.main(args=list(argv) if argv is not None else None, prog_name="conveyor")
    sys.exit(EXIT_OK)  # pragma: no cover - click's standalone mode always exits


__all__ = ["COMMANDS", "CONTEXT", "EXIT_CODES", "ConveyorGroup", "cli", "main"]
