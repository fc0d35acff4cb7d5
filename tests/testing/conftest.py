"""The toolkit's own fixtures (``conveyor_app``, from the installed pytest plugin) on
both backends: ``conveyor_database_url`` is overridden with the suite's ``db_url``
(a fresh SQLite file, or the session's PostgreSQL database emptied)."""

from __future__ import annotations

import pytest


@pytest.fixture
def conveyor_database_url(db_url: str) -> str:
    return db_url
