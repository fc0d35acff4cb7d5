"""Named-query loader: each dialect keeps its SQL in ``sql/<dialect>/queries.sql``.

A query starts at a ``-- name: <name>`` line and runs to the next one. Both dialects
must define the same names; a test checks it.
"""

from __future__ import annotations

import re
from importlib import resources

from ._protocol import Migration

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_MIGRATION_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


def load_queries(dialect: str) -> dict[str, str]:
    """Return ``{name: sql}`` for one dialect."""
    text = resources.files(__package__).joinpath("sql", dialect, "queries.sql").read_text("utf-8")
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
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
