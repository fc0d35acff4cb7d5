"""Freezing a worker process with SIGSTOP at a moment that tests what the caller means.

A worker frozen inside a write holds SQLite's one write lock (or PostgreSQL row locks)
and stalls every other worker until SIGCONT: a real hazard of SIGSTOP (see
``docs/reliability.md``), but not the lease expiry the callers test. Frozen between
writes, it holds nothing, and only its lease runs out.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
from pathlib import Path

import psycopg

from .conftest import wait_for


def no_open_write(db_url: str) -> bool:
    """Whether no other connection holds a write open: SQLite's write lock is free, or no
    PostgreSQL backend of this database is inside a transaction (holding row locks)."""
    if db_url.startswith("sqlite"):
        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"), timeout=0,
                               isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            return True
        except sqlite3.OperationalError:
            return False
        finally:
            conn.close()
    with psycopg.connect(db_url, autocommit=True) as pg:
        row = pg.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                         " AND pid <> pg_backend_pid() AND xact_start IS NOT NULL").fetchone()
    return row is not None and row[0] == 0


def stopped(pid: int) -> bool:
    """Whether the process is in the stopped state ("T" in ``/proc/PID/stat``)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def freeze_between_writes(proc: subprocess.Popen[bytes], db_url: str,
                          timeout: float = 30.0) -> None:
    """SIGSTOP ``proc`` at a moment it holds no write open (SIGCONT and retry otherwise)."""

    def frozen_outside_a_write() -> bool:
        proc.send_signal(signal.SIGSTOP)
        wait_for(lambda: stopped(proc.pid), 10, 0.005, "the worker to stop")
        if no_open_write(db_url):
            return True
        proc.send_signal(signal.SIGCONT)  # let it finish that write before the next try
        return False

    wait_for(frozen_outside_a_write, timeout, 0.005,
             "a SIGSTOP that finds the worker holding no write")
