"""The virtual clock of the testing toolkit, in SQL.

Every statement measures time on the database clock. An app built with a test clock
loads its statements with each database-clock expression replaced by "that clock plus
the offset stored in ``conveyor_test_clock``": every connection, and every process
configured the same way, then sees the same virtual time, and ``clock.advance()`` is
one row written. Without a clock nothing here runs: the statements are the files' own
text, byte for byte, so production pays nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import resources

from .schema import _NAME

#: The offset, from its one-row table (``clock_create`` in ``<dialect>/testing.sql``).
_OFFSET = "coalesce((SELECT offset_seconds FROM conveyor_test_clock WHERE id = 1), 0.0)"

_SQLITE_NOW = "(julianday('now') - 2440587.5) * 86400.0"
_SQLITE_VIRTUAL = f"({_SQLITE_NOW} + {_OFFSET})"
#: ``strftime(format, 'now')``: the same instant, as text.
_SQLITE_TEXT = re.compile(r"strftime\(('[^']*'), 'now'\)")
_POSTGRES_NOW = re.compile(r"\bnow\(\)")
_POSTGRES_VIRTUAL = f"(now() + {_OFFSET} * interval '1 second')"
#: What must not be left in a statement once rewritten (a form this module missed).
_LEFT = {"sqlite": re.compile(r"'now'|\bcurrent_(timestamp|time|date)\b", re.IGNORECASE),
         "postgres": re.compile(
             r"\bnow\(\)|\b(current_timestamp|clock_timestamp|statement_timestamp|"
             r"transaction_timestamp|localtimestamp)\b", re.IGNORECASE)}
_VIRTUAL = {"sqlite": _SQLITE_VIRTUAL, "postgres": _POSTGRES_VIRTUAL}


def virtual_sql(dialect: str, sql: str) -> str:
    """``sql`` with the database clock replaced by the virtual clock."""
    if dialect == "sqlite":
        out = sql.replace(_SQLITE_NOW, _SQLITE_VIRTUAL)
        out = _SQLITE_TEXT.sub(lambda m: f"strftime({m[1]}, {_SQLITE_VIRTUAL}, 'unixepoch')", out)
    elif dialect == "postgres":
        out = _POSTGRES_NOW.sub(_POSTGRES_VIRTUAL, sql)
    else:
        raise ValueError(f"unknown dialect {dialect!r}")
    left = _LEFT[dialect].search(out.replace(_VIRTUAL[dialect], ""))
    if left is not None:
        raise ValueError(f"a database clock form the virtual clock does not know: {left[0]!r}")
    return out


def virtual_queries(dialect: str, queries: Mapping[str, str]) -> dict[str, str]:
    """Every named statement with the virtual clock in place of the database clock."""
    return {name: virtual_sql(dialect, sql) for name, sql in queries.items()}


def testing_queries(dialect: str) -> dict[str, str]:
    """The toolkit's own statements (``<dialect>/testing.sql``): kept out of ``sql/`` so
    that production never loads them and the query-plan suite does not explain a table
    that only test databases have."""
    if dialect not in ("sqlite", "postgres"):
        raise ValueError(f"unknown dialect {dialect!r}")
    text = resources.files(__package__).joinpath(dialect, "testing.sql").read_text("utf-8")
    parts = _NAME.split(text)
    return {name: body.strip().rstrip(";") for name, body in zip(parts[1::2], parts[2::2],
                                                                 strict=True)}
