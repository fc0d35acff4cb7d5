"""The CLI's app loading (APP_PATH, URL precedence) and worker pieces: queue
parsing, logging formats, and the supervisor behind ``conveyor worker --processes N``.

Loading errors are click usage errors (exit 2); a malformed URL is reported as
DatabaseUnavailableError, which the CLI maps to exit 3 like an unreachable database.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from types import FrameType
from typing import Any

import click

from ._app import Conveyor
from ._config import DEFAULT_URL, ConveyorConfig, WorkerConfig
from ._errors import DatabaseUnavailableError, SchemaError
from ._logfields import JobFields
from ._task import Task

LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]

#: Fields the runtime passes with ``extra=`` and both formats show when present.
JOB_FIELDS = ("job_id", "task", "queue", "attempt")


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerOptions:
    """The worker command's options, parsed; children of a supervisor get the same."""

    queues: dict[str, int]
    concurrency: int = 10
    burst: bool = False
    shutdown_timeout: float = 30.0
    lease_ttl: float = 30.0
    heartbeat_interval: float = 2.0
    leader_ttl: float = 15.0
    completed_retention: float = 86_400.0
    discarded_retention: float = 7 * 86_400.0
    log_level: str = "INFO"
    log_format: str = "text"


# -- the app and its URL ----------------------------------------------------------------


def check_url(url: str, config: ConveyorConfig | None = None) -> Conveyor:
    """An app without tasks on ``url``; a malformed URL is DatabaseUnavailableError."""
    try:
        return Conveyor(url, config=config)
    except ValueError as exc:
        raise DatabaseUnavailableError(str(exc)) from None


def import_app(app_path: str, url: str | None = None) -> Conveyor:
    """Import ``module:attribute``; ``url`` is ``$CONVEYOR_URL`` while importing, so an
    app built with ``Conveyor()`` picks it up."""
    module_name, sep, attr = app_path.partition(":")
    if not sep or not module_name or not attr:
        raise click.UsageError(f"bad APP_PATH {app_path!r}: expected module:attribute")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    saved = os.environ.get("CONVEYOR_URL")
    if url is not None:
        os.environ["CONVEYOR_URL"] = url
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise click.UsageError(f"cannot import APP_PATH {app_path!r}: {exc}") from None
    except (DatabaseUnavailableError, SchemaError):
        raise
    except Exception as exc:
        raise click.UsageError(
            f"importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    finally:
        if url is not None:
            _restore_env("CONVEYOR_URL", saved)
    return _app_attribute(module, module_name, attr)


def _restore_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _app_attribute(module: Any, module_name: str, attr: str) -> Conveyor:
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise click.UsageError(
                f"module {module_name!r} has no attribute {attr!r}"
            ) from None
    if not isinstance(obj, Conveyor):
        raise click.UsageError(
            f"{module_name}:{attr} is not a Conveyor app (it is a {type(obj).__name__})"
        )
    return obj


def retarget(app: Conveyor, url: str) -> Conveyor:
    """A copy of ``app`` on another database, with the same tasks registered.

    Handlers that enqueue through the original module's task objects still write to
    the app's own URL.
    """
    new = check_url(url, app.config)
    for name, task in app.tasks.items():  # every option: limits, unique, concurrency too
        new.tasks[name] = Task(new, task.fn, task.defaults)
    new.schedules.update(app.schedules)
    new.hooks = app.hooks
    return new


def resolve_url(app_path: str | None, url: str | None) -> str:
    """--url, else the app's own URL, else $CONVEYOR_URL, else sqlite:///conveyor.db."""
    if url:
        return url
    if app_path:
        return import_app(app_path).url
    return os.environ.get("CONVEYOR_URL") or DEFAULT_URL


def open_app(app_path: str | None, url: str | None) -> Conveyor:
    """The app to act on: the imported one (on --url if given), else a bare one."""
    if url:
        check_url(url)
    if not app_path:
        return check_url(resolve_url(None, url))
    app = import_app(app_path, url)
    return retarget(app, url) if url and app.url != url else app


# -- queues and config -------------------------------------------------------------------


def parse_queues(specs: Sequence[str], concurrency: int) -> dict[str, int]:
    """``("default,mail:5",)`` -> ``{"default": concurrency, "mail": 5}``."""
    queues: dict[str, int] = {}
    for entry in (part.strip() for spec in specs for part in spec.split(",")):
        if not entry:
            continue
        name, sep, limit = entry.partition(":")
        name = name.strip()
        if not name:
            raise click.BadParameter(f"empty queue name in {entry!r}", param_hint="-q")
        if not sep:
            queues[name] = concurrency
            continue
        try:
            value = int(limit)
        except ValueError:
            value = 0
        if value < 1:
            raise click.BadParameter(
                f"concurrency of {name!r} must be an int >= 1, got {limit!r}", param_hint="-q"
            )
        queues[name] = value
    return queues or {"default": concurrency}


def build_config(opts: WorkerOptions) -> WorkerConfig:
    """The WorkerConfig; its validation errors are usage errors (exit 2)."""
    from . import _payload

    try:
        for name in opts.queues:
            _payload.check_queue_name(name)
        return WorkerConfig(
            queues=dict(opts.queues),
            lease_ttl=opts.lease_ttl,
            heartbeat_interval=opts.heartbeat_interval,
            leader_ttl=opts.leader_ttl,
            completed_retention=opts.completed_retention,
            discarded_retention=opts.discarded_retention,
            shutdown_timeout=opts.shutdown_timeout,
            burst=opts.burst,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


# -- logging --------------------------------------------------------------------------------


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, and the job's fields."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for field in JOB_FIELDS:
            value = record.__dict__.get(field)
            if value is not None:
                doc[field] = value
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``time level logger: message [job_id=.. task=..]``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = [f"{f}={record.__dict__[f]}" for f in JOB_FIELDS
                  if record.__dict__.get(f) is not None]
        if not fields:
            return line
        head, newline, rest = line.partition("\n")  # keep a traceback below the fields
        return f"{head} [{' '.join(fields)}]{newline}{rest}"


def configure_logging(level: str, fmt: str) -> None:
    """Send the ``conveyor`` loggers to stderr in the chosen format."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(JobFields())
    logger = logging.getLogger("conveyor")
    for old in list(logger.handlers):
        if getattr(old, "_conveyor_cli", False):
            logger.removeHandler(old)
    handler._conveyor_cli = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


def exit_if_handlers_linger(grace: float = 0.5) -> None:
    """After the worker stopped, do not wait for sync handlers still running.

    Their jobs were already given back at the shutdown timeout; Python cannot stop a
    thread, and the interpreter would otherwise wait for each one at exit, holding the
    process (and the job's side effects) alive long past ``--shutdown-timeout``.
    """
    deadline = time.monotonic() + grace
    lingering = []
    for thread in threading.enumerate():
        if thread.name.startswith("conveyor-job"):
            thread.join(max(deadline - time.monotonic(), 0))
            if thread.is_alive():
                lingering.append(thread)
    if not lingering:
        return
    logging.getLogger("conveyor.worker").warning(
        "%d sync handler(s) ignored the stop and still run; their jobs were given back, "
        "exiting without them", len(lingering))
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# -- the supervisor -----------------------------------------------------------------------


def child_argv(app_path: str, url: str | None, opts: WorkerOptions) -> list[str]:
    """The command line of one child worker: same options, one process."""
    queues = ",".join(f"{name}:{limit}" for name, limit in opts.queues.items())
    argv = [
        sys.executable, "-m", "conveyor", "worker", app_path,
        "--queues", queues,
        "--concurrency", str(opts.concurrency),
        "--shutdown-timeout", repr(opts.shutdown_timeout),
        "--lease-ttl", repr(opts.lease_ttl),
        "--heartbeat-interval", repr(opts.heartbeat_interval),
        "--leader-ttl", repr(opts.leader_ttl),
        "--completed-retention", repr(opts.completed_retention),
        "--discarded-retention", repr(opts.discarded_retention),
        "--log-level", opts.log_level,
        "--log-format", opts.log_format,
        "--processes", "1",
    ]
    if opts.burst:
        argv.append("--burst")
    if url:
        argv += ["--url", url]
    return argv


def _exit_code(returncode: int) -> int:
    """A child killed by signal N (returncode -N) counts as the shell's 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def supervise(argv: list[str], processes: int, poll: float = 0.1) -> int:
    """Run ``processes`` children, forward SIGTERM/SIGINT, return the worst exit code.

    Children get their own process group, so a terminal's Ctrl-C reaches them only
    once, through us. If one child fails, the others are asked to stop too.
    """
    children = [subprocess.Popen(argv, process_group=0) for _ in range(processes)]
    stopping = False

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while any(child.poll() is None for child in children):
            failed = any(child.returncode not in (None, 0) for child in children)
            if failed and not stopping:
                forward(signal.SIGTERM, None)
            time.sleep(poll)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return max(_exit_code(child.returncode) for child in children)
