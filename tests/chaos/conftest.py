"""Fixtures of the chaos suite; every test in this package is marked ``chaos``.

Quick mode (the default, part of ``make test``) keeps the whole package to a few
minutes; ``CONVEYOR_CHAOS=long`` (``make chaos``) runs bigger job counts and repeats.
Every scenario is also marked ``heavy``: under xdist one worker runs them one after
another, beside the light tests on the other.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from ..conftest import migrate, truncate_conveyor_tables
from . import harness

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before tests/conftest.py's hook groups the heavy tests
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).resolve().parent == HERE:
            item.add_marker(pytest.mark.chaos)
            item.add_marker(pytest.mark.heavy)  # under xdist: one scenario at a time
            if harness.LONG:
                item.add_marker(pytest.mark.timeout(1800))


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [f"chaos: {harness.MODE} mode (CONVEYOR_CHAOS=long for the long one)"]


@pytest.fixture
def chaos_dir(tmp_path: Path) -> Path:
    """A working folder for the scenario's ledger and worker logs."""
    folder = tmp_path / "chaos"
    folder.mkdir()
    return folder


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'chaos.db'}"
    migrate(url)
    return url


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> str:
    """The session's PostgreSQL test database, emptied."""
    url = cast(str, request.getfixturevalue("postgres_db_url"))
    truncate_conveyor_tables(url)
    return url


@pytest.fixture
def started() -> Iterator[float]:
    """The scenario's start (monotonic), for its duration in the report."""
    yield time.monotonic()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "chaos: fault-injection scenario (quick by default, CONVEYOR_CHAOS=long for more)")
