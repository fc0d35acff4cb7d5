"""TEMPORARY: deletes one queue's jobs until the storage track's
``Storage.job_delete_by_queue(queue)`` lands; delete this file at merge.

Only ``Operations.delete_queue_jobs`` uses it, and only when the storage lacks the
method (the one place outside ``conveyor._storage`` that still holds SQL).
"""

from __future__ import annotations


def delete_by_queue(url: str, queue: str) -> int:
    if url.lower().startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(url[len("sqlite:///"):], timeout=30)
        try:
            with conn:
                return conn.execute("DELETE FROM conveyor_jobs WHERE queue = ?", (queue,)).rowcount
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(url, autocommit=True) as pg:
        return pg.execute("DELETE FROM conveyor_jobs WHERE queue = %s", [queue]).rowcount
