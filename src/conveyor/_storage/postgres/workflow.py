"""PostgreSQL driver of the workflow steps (``_storage/workflow.py``): inserted rows
go as column arrays (one statement per step), on an async connection or on a caller's
sync psycopg connection, inside a transaction the caller holds."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from ..workflow import Steps
from .connection import CALLER_PREPARE


def _values(payload: Mapping[str, Any], channel: str) -> dict[str, Any]:
    if "rows" not in payload:
        return {**payload, "channel": channel}
    rows = payload["rows"]
    values: dict[str, Any] = {"channel": channel}
    for key in rows[0]:
        column = [r[key] for r in rows]
        if key == "run_at":
            column = [v.astimezone(UTC) if isinstance(v, datetime) else None for v in column]
        elif key == "delay":
            column = [None if v is None else float(v) for v in column]
        values[key] = column
    return values


async def run_steps(conn: psycopg.AsyncConnection[Any], queries: Mapping[str, str],
                    channel: str, steps: Steps, prepare: bool | None = None) -> Any:
    try:
        step = next(steps)
        while True:
            name, payload = step
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(queries[name], _values(payload, channel), prepare=prepare)
                rows = await cur.fetchall() if cur.description is not None else []
            step = steps.send(list(rows))
    except StopIteration as stop:
        return stop.value


def run_steps_sync(conn: Any, queries: Mapping[str, str], channel: str, steps: Steps) -> Any:
    if not isinstance(conn, psycopg.Connection):
        raise TypeError(
            "connection= on the PostgreSQL backend must be a psycopg (3) Connection or "
            f"AsyncConnection to the same database, not {type(conn).__name__}")
    try:
        step = next(steps)
        while True:
            name, payload = step
            with conn.cursor(row_factory=dict_row) as cur:
                cur.execute(queries[name], _values(payload, channel), prepare=CALLER_PREPARE)
                rows = cur.fetchall() if cur.description is not None else []
            step = steps.send(list(rows))
    except StopIteration as stop:
        return stop.value
