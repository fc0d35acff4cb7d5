"""Loading the app a command acts on: APP_PATH (``module:attribute``) and the URL
precedence (--url, else the app's own URL, else $CONVEYOR_URL, else the default).

Loading errors are click usage errors (exit 2); an exception raised while importing the
user's module prints its traceback, cut to the user's own frames (not Conveyor's or
importlib's), with the file, line and caret of a SyntaxError. A malformed URL is reported
as DatabaseUnavailableError, which the CLI maps to exit 3 like an unreachable database.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import click

from .._app import Conveyor
from .._config import DEFAULT_URL, ConveyorConfig
from .._errors import DatabaseUnavailableError, SchemaError
from .._task import Task
from ._base import UsageFailure
from ._render import safe

#: Frames of these files are Conveyor's or Python's import machinery, not the user's.
_NOT_USERS = ("<frozen ", str(Path(__file__).resolve().parent.parent),
              str(Path(importlib.__file__).resolve().parent))


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
        if exc.name is None or module_name == exc.name or module_name.startswith(exc.name + "."):
            raise click.UsageError(f"cannot import APP_PATH {app_path!r}: {exc}") from None
        raise _import_failure(module_name, exc) from None  # an import inside their code
    except (DatabaseUnavailableError, SchemaError):
        raise
    except Exception as exc:
        raise _import_failure(module_name, exc) from None
    finally:
        if url is not None:
            _restore_env("CONVEYOR_URL", saved)
    return _app_attribute(module, module_name, attr)


def _user_frames(exc: BaseException) -> traceback.StackSummary:
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith(_NOT_USERS)]
    return traceback.StackSummary.from_list(frames)


def _import_failure(module_name: str, exc: BaseException) -> UsageFailure:
    """Print the traceback of the user's code on stderr; the one-line error names the
    file and line where it failed."""
    frames = _user_frames(exc)
    lines = ["Traceback (most recent call last):\n", *frames.format()] if frames else []
    lines += traceback.format_exception_only(type(exc), exc)
    click.echo(safe("".join(lines).rstrip(), multiline=True), err=True)
    where = ""
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f" ({exc.filename}, line {exc.lineno})"
    elif frames:
        where = f" ({frames[-1].filename}, line {frames[-1].lineno})"
    message = str(exc.msg) if isinstance(exc, SyntaxError) else str(exc)
    return UsageFailure(
        f"importing {module_name!r} failed: {type(exc).__name__}: {message}{where}")


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
    new.codec = app.codec  # the argument types it registered
    for name, task in app.tasks.items():  # every option: limits, unique, concurrency too
        new.tasks[name] = Task(new, task.fn, task.defaults, app.codec)
    new.schedules.update(app.schedules)
    new.hooks = app.hooks
    for limiter in app.limiters.values():
        new.limiter(limiter.name, **limiter.options())
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
