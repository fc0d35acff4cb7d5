"""Django tasks the tests enqueue beside the example's (a worker imports them by path)."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.tasks import task


@task
def connection_state() -> dict[str, Any]:
    """Whether this thread's connection was still open when the job started, and the
    server process serving it."""
    was_open = connection.connection is not None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        row = cursor.fetchone()
    return {"was_open": was_open, "pid": row[0] if row else None}
