"""SQLite driver of the workflow steps (``_storage/workflow.py``): one transaction, one
statement per inserted row (rows go in on the writer's own connection: no round trip)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..workflow import Steps


def _value(key: str, value: Any) -> Any:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, bool):
        return int(value)
    if key == "ids":
        return json.dumps(list(value))
    return value


def run_steps(conn: sqlite3.Connection, queries: Mapping[str, str], steps: Steps) -> Any:
    """Run ``steps`` on ``conn`` (already in a transaction); their value."""
    conn.execute("PRAGMA recursive_triggers=ON")  # a caller's connection may lack it
    previous = conn.row_factory
    conn.row_factory = sqlite3.Row
    try:
        step = next(steps)
        while True:
            name, payload = step
            sql = queries[name]
            rows: list[Any] = []
            if "rows" in payload:
                for row in payload["rows"]:
                    values = {k: _value(k, v) for k, v in row.items()}
                    rows.extend(conn.execute(sql, values).fetchall())
            else:
                rows = conn.execute(sql, {k: _value(k, v) for k, v in payload.items()}
                                    ).fetchall()
            step = steps.send(rows)
    except StopIteration as stop:
        return stop.value
    finally:
        conn.row_factory = previous
