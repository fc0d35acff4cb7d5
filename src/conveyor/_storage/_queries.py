"""Named-query loader: each dialect keeps its SQL in ``sql/<dialect>/*.sql`` files.

A query starts at a ``-- name: <name>`` line and runs to the next one. Both dialects
must define the same names in files of the same names; a test checks it.
"""

from __future__ import annotations

import re
from importlib import resources

from ._protocol import Migration

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_MIGRATION_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


def load_queries(dialect: str) -> dict[str, str]:
    """Return ``{name: sql}`` for one dialect, from every ``*.sql`` file of its folder
    (one file per area: jobs, queues, cron...); a name defined twice is an error."""
    folder = resources.files(__package__).joinpath("sql", dialect)
    queries: dict[str, str] = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        parts = _NAME.split(entry.read_text("utf-8"))
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in queries:
                raise ValueError(f"query {name!r} defined twice for {dialect}")
            queries[name] = body.strip().rstrip(";")
    return queries


def load_migrations(dialect: str) -> list[Migration]:
    """Return every migration of one dialect, ordered by version."""
    folder = resources.files(__package__).joinpath("sql", dialect, "migrations")
    found: list[Migration] = []
    for entry in folder.iterdir():
        match = _MIGRATION_FILE.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise ValueError(f"{dialect} migrations are not numbered 1..n without gaps")
    return found
