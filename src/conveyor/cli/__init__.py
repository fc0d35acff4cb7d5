"""The ``conveyor`` command line: run workers, migrate, enqueue and inspect jobs.

One module per command group; this one only assembles them under the root group.
Every command takes ``--app module:attribute`` (or ``$CONVEYOR_APP``) and ``--url``
(or ``$CONVEYOR_URL``). Failures map to the documented exit codes in ``EXIT_CODES``
and print one line on stderr, never a traceback (set ``CONVEYOR_DEBUG=1`` for one).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NoReturn

import click

from .. import __version__
from ._base import CONTEXT, EPILOG, EXIT_CODES, EXIT_OK, ConveyorGroup
from .batches import batches
from .bench import bench
from .dashboard import dashboard_cmd
from .demo import demo
from .enqueue import enqueue
from .jobs import jobs
from .maintenance import prune, rescue
from .migrate import migrate
from .queues import queues
from .schedules import schedules
from .status import check_cmd, status_cmd
from .worker import worker
from .workflows import workflows


@click.group(cls=ConveyorGroup, context_settings=CONTEXT, epilog=EPILOG)
@click.version_option(__version__, prog_name="conveyor")
def cli() -> None:
    """Conveyor: a durable background job queue (SQLite embedded, PostgreSQL to scale out).

    Try `conveyor demo`, then `conveyor jobs list`.
    """


for command in (migrate, enqueue, jobs, worker, demo, bench, queues, schedules,
                dashboard_cmd, check_cmd, status_cmd, prune, rescue, workflows, batches):
    cli.add_command(command)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console-script entry point (``conveyor``), also ``python -m conveyor``."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="conveyor")
    sys.exit(EXIT_OK)  # pragma: no cover - click's standalone mode always exits


__all__ = ["EXIT_CODES", "cli", "main"]
