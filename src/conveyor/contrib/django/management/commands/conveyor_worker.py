"""``manage.py conveyor_worker``: ``conveyor worker`` for the Django tasks of a
ConveyorBackend, with every flag of ``conveyor worker`` (``--help`` lists them).

The flags are not copied here: everything but ``--backend`` and Django's own options is
handed to the ``conveyor worker`` command itself, with the app of ``TASKS[--backend]``.
Without ``-q``, the worker serves the backend's ``QUEUES``.
"""

from __future__ import annotations

import os
import sys
from argparse import Namespace
from collections.abc import Sequence
from importlib import import_module
from pathlib import Path
from typing import Any

import click
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections
from django.tasks import task_backends
from django.tasks.exceptions import InvalidTaskBackend

from conveyor.cli import CONTEXT, ConveyorGroup
from conveyor.cli.worker import worker
from conveyor.contrib.django.backend import ConveyorBackend
from conveyor.contrib.django.worker_apps import app_path

NAME = "conveyor_worker"
#: Set by TASKS, so refused on this command's line.
REFUSED = ("--app", "--url")


class _PassThroughParser(CommandParser):
    """Parses Django's options and ``--backend``; the rest goes to ``conveyor worker``."""

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: Namespace | None = None) -> Namespace:
        parsed, rest = self.parse_known_args(args, namespace)
        parsed.worker_args = rest
        return parsed


def _is_option(arg: str, names: Sequence[str]) -> bool:
    return any(arg == n or arg.startswith(n + "=") for n in names)


def import_roots() -> list[str]:
    """Where the project is imported from, for the children of ``--processes`` (they
    run ``python -m conveyor``, whose sys.path lacks manage.py's directory): the
    directory of the script and the one the settings package is imported from."""
    roots = []
    if sys.argv and sys.argv[0].endswith(".py"):
        roots.append(str(Path(sys.argv[0]).resolve().parent))
    module = os.environ.get("DJANGO_SETTINGS_MODULE")
    if module:
        path = Path(str(import_module(module).__file__)).resolve()
        for _ in module.split("."):
            path = path.parent
        roots.append(str(path))
    return roots


class Command(BaseCommand):
    help = ("Run a Conveyor worker for the Django tasks of TASKS[--backend]: every flag of "
            "`conveyor worker` (-q, -c, --processes, --burst, --shutdown-timeout, ...).")

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = _PassThroughParser(
            prog=f"{os.path.basename(prog_name)} {subcommand}", description=self.help,
            add_help=False, allow_abbrev=False,
            called_from_command_line=getattr(self, "_called_from_command_line", None))
        parser.add_argument("--backend", default="default",
                            help="The TASKS alias of a ConveyorBackend (default: default).")
        parser.add_argument("--settings")
        parser.add_argument("--pythonpath")
        parser.add_argument("--traceback", action="store_true")
        parser.add_argument("--verbosity", type=int, default=1)
        parser.add_argument("--no-color", action="store_true")
        parser.add_argument("--force-color", action="store_true")
        parser.add_argument("--skip-checks", action="store_true")
        return parser

    def handle(self, *args: Any, **options: Any) -> None:
        alias = options["backend"]
        try:
            backend = task_backends[alias]
        except InvalidTaskBackend as exc:
            raise CommandError(str(exc)) from None
        if not isinstance(backend, ConveyorBackend):
            raise CommandError(f"TASKS[{alias!r}] is a {type(backend).__name__}, "
                               "not conveyor.contrib.django.ConveyorBackend")
        argv = [str(a) for a in (*args, *options.get("worker_args", ()))]
        if any(_is_option(a, REFUSED) for a in argv):
            raise CommandError("the app and its database come from TASKS: set "
                               f"TASKS[{alias!r}]['OPTIONS']['URL'] instead of --app/--url")
        if not any(_is_option(a, ("-q", "--queues")) or (a.startswith("-q") and a[2:3] != "-")
                   for a in argv):
            argv = ["--queues", ",".join(sorted(backend.queues) or ["default"]), *argv]
        os.environ["PYTHONPATH"] = os.pathsep.join(
            dict.fromkeys(p for p in (*import_roots(), os.environ.get("PYTHONPATH")) if p))
        code = run_worker([app_path(alias), *argv], prog=f"{os.path.basename(sys.argv[0])}")
        connections.close_all()
        if code:
            raise CommandError(f"the worker exited with code {code}", returncode=code)


def run_worker(argv: list[str], prog: str) -> int:
    """``conveyor worker ARGV`` under the CLI's error mapping; its exit code."""

    @click.group(cls=ConveyorGroup, context_settings=CONTEXT)
    def root() -> None:
        pass

    root.add_command(worker, NAME)
    try:
        root.main(args=[NAME, *argv], prog_name=prog)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0
