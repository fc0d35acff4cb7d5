"""Conveyor's pytest plugin (entry point ``pytest11``: loaded by pytest on its own once
Conveyor is installed). Its fixtures all start with ``conveyor_``.

Settings (``pytest.ini``, ``[tool.pytest.ini_options]`` or ``setup.cfg``):

* ``conveyor_app = "myproj.tasks:app"``: the app whose tasks the tests use. Each test
  points that same object (its tasks are bound to it) at a fresh database, and back
  afterwards. Without it, ``conveyor_app`` is a new empty ``Conveyor``. Or override the
  ``conveyor_target_app`` fixture to return your app.
* ``conveyor_database_url = "postgresql://user@host/postgres"`` or the environment
  variable ``CONVEYOR_TEST_DATABASE_URL`` (which wins): a PostgreSQL server on which
  each test gets a database of its own (a copy of a template migrated once per
  session), dropped after the test. Without it, each test gets a new SQLite file in
  its ``tmp_path``.

Fixtures: ``conveyor_database_url`` (this test's fresh database), ``conveyor_clock``
(a ``VirtualClock``; the app runs on it when the test asks for it), ``conveyor_app``.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .._app import Conveyor, create_database, drop_database
from .._clock import VirtualClock

ENV_URL = "CONVEYOR_TEST_DATABASE_URL"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("conveyor_app", "module:attribute of the Conveyor app the tests use",
                  default="")
    parser.addini("conveyor_database_url", "a PostgreSQL server URL: each test gets a fresh "
                  f"database on it (${ENV_URL} wins); default: a SQLite file per test",
                  default="")


def _server_url(config: pytest.Config) -> str | None:
    url = os.environ.get(ENV_URL) or str(config.getini("conveyor_database_url") or "")
    return url.strip() or None


def load_app(target: str) -> Conveyor:
    """The app named ``module:attribute`` (``attribute`` may be dotted)."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise pytest.UsageError(f"conveyor_app must look like 'module:attribute', got {target!r}")
    try:
        obj: object = importlib.import_module(module_name)
        for part in attribute.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise pytest.UsageError(f"conveyor_app = {target!r} cannot be loaded: {exc}") from exc
    if not isinstance(obj, Conveyor):
        raise pytest.UsageError(f"conveyor_app = {target!r} is a {type(obj).__name__}, "
                                "not a conveyor.Conveyor")
    return obj


@pytest.fixture(scope="session")
def conveyor_postgres_template(pytestconfig: pytest.Config) -> Iterator[tuple[str, str] | None]:
    """(server URL, template database) when a PostgreSQL server is configured, else None."""
    server = _server_url(pytestconfig)
    if server is None:
        yield None
        return
    name, url = create_database(server, "conveyor_tpl")
    try:
        migrator = Conveyor(url)
        try:
            migrator.migrate()
        finally:
            migrator.close()
        yield server, name
    finally:
        drop_database(server, name)


@pytest.fixture
def conveyor_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """This test's own empty database: a SQLite file, or a PostgreSQL database."""
    template = request.getfixturevalue("conveyor_postgres_template")
    if template is None:
        yield f"sqlite:///{tmp_path / 'conveyor.db'}"
        return
    server, template_name = template
    name, url = create_database(server, "conveyor_tdb", template=template_name)
    try:
        yield url
    finally:
        drop_database(server, name)


@pytest.fixture
def conveyor_clock() -> VirtualClock:
    """A virtual clock; ``conveyor_app`` runs on it in every test that asks for it."""
    return VirtualClock()


@pytest.fixture
def conveyor_target_app(pytestconfig: pytest.Config) -> Conveyor | None:
    """The app ``conveyor_app`` isolates: the ``conveyor_app`` ini setting's, or None
    for a new empty one. Override this fixture to name your app in code."""
    target = str(pytestconfig.getini("conveyor_app") or "").strip()
    return load_app(target) if target else None


@pytest.fixture
def conveyor_app(request: pytest.FixtureRequest, conveyor_database_url: str,
                 conveyor_target_app: Conveyor | None) -> Iterator[Conveyor]:
    """An app on this test's fresh database (and on ``conveyor_clock`` when the test
    uses it); connections closed, and a shared app pointed back, after the test."""
    clock = (request.getfixturevalue("conveyor_clock")
             if "conveyor_clock" in request.fixturenames else None)
    if conveyor_target_app is None:
        app = Conveyor(conveyor_database_url, clock=clock)
        try:
            yield app
        finally:
            app.close()
        return
    with conveyor_target_app.rebind(conveyor_database_url, clock=clock):
        yield conveyor_target_app
