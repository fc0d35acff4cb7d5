"""Skips that would hide a missing piece are failures in a complete run (CI).

A test whose dependency is absent (a package of the dev extras, git history, Django in
``.venv-django``) skips loudly on a developer's machine. In a complete run it fails
instead, so that CI cannot pass with a part of the suite silently not run. A run is
complete when ``CI=true``, ``CONVEYOR_REQUIRE_ALL=1``, or any ``CONVEYOR_REQUIRE_*``
flag of ``.ci/run`` is set (POSTGRES, BROWSER, DJANGO, PGBOUNCER): each of those says
"this run is the one that must test everything".
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType
from typing import NoReturn

import pytest

TRUTHY = frozenset({"1", "true", "yes", "on"})
ALL = "CONVEYOR_REQUIRE_ALL"
FLAGS = ("CONVEYOR_REQUIRE_POSTGRES", "CONVEYOR_REQUIRE_BROWSER", "CONVEYOR_REQUIRE_DJANGO",
         "CONVEYOR_REQUIRE_PGBOUNCER")


def _on(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in TRUTHY


def complete_run() -> bool:
    """Whether this run must test everything (CI): see the module's docstring."""
    return _on("CI") or _on(ALL) or any(_on(flag) for flag in FLAGS)


def missing(reason: str) -> NoReturn:
    """Skip (module level too) for ``reason``, or fail in a complete run."""
    if complete_run():
        pytest.fail(f"{reason}; this is a complete run ({ALL}, CI=true or a "
                    f"CONVEYOR_REQUIRE_* flag is set), which must not skip it", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def import_or_skip(module: str, reason: str) -> ModuleType:
    """``pytest.importorskip``, but a failure in a complete run."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing(f"{reason} ({module}: {exc})")



def django_importable() -> None:
    """The Django suite's guard (its conftest): the main venv (Python 3.11) skips the
    suite by design, as does a developer's run without Django (each module's
    importorskip); in a complete run on Python >= 3.12 (``.venv-django``) a Django that
    does not import fails the run."""
    if sys.version_info >= (3, 12) and complete_run():
        import_or_skip("django", "Django does not import in this Python >= 3.12 venv "
                       "(.venv-django: make django-venv)")
