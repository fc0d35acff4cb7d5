"""What every result records about the machine, the interpreter and the databases."""

from __future__ import annotations

import os
import platform
import sqlite3
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import psycopg
from tests import _evidence

import conveyor

#: Where every tool of the suite writes its result files.
DEFAULT_OUT = Path(__file__).resolve().parent / "results"

#: Pragmas Conveyor's SQLite connection runs with, as read back from a live one.
SQLITE_PRAGMAS = ("journal_mode", "synchronous", "busy_timeout", "foreign_keys",
                  "cache_size", "page_size", "mmap_size", "temp_store")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def compile_bytecode(*roots: Path) -> None:
    """Compile these trees to bytecode before anything is measured, as an installed
    package ships: with ``PYTHONDONTWRITEBYTECODE`` set (this machine sets it) no
    process keeps what it compiles, so each run compiled Conveyor's modules again, and
    the worker's runtime, imported when ``run_worker`` starts, paid that (about 20 ms)
    inside the measured time. Python reads existing bytecode whatever that variable."""
    import compileall

    for root in roots:
        compileall.compile_dir(str(root), quiet=1)


def git_stamp() -> dict[str, Any]:
    """The commit checked out and whether the measured code (``BENCH_MEASURED``: the
    library, ``bench/*.py``, ``pyproject.toml``; never ``bench/results/`` or docs) was
    identical to it."""
    return _evidence.stamp(_evidence.BENCH_MEASURED)


def machine() -> dict[str, Any]:
    """CPU, cores, OS, Python and driver versions, load average at the time."""
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "python_impl": platform.python_implementation(),
        "conveyor": conveyor.__version__,
        "psycopg": psycopg.__version__,
        "psycopg_binary": _version("psycopg-binary"),
        "psycopg_pool": _version("psycopg-pool"),
        "libpq": psycopg.pq.version(),
        "sqlite": sqlite3.sqlite_version,
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "git": git_stamp(),
        "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def sqlite_settings(path: str) -> dict[str, Any]:
    """The pragmas of a connection opened exactly as Conveyor opens its own."""
    # imported here, so that `python -m bench.ab` can drive commits older than this layout
    from conveyor._storage.sqlite import SQLiteConfig
    from conveyor._storage.sqlite.connection import connect

    conn = connect(SQLiteConfig(path=path))
    try:
        pragmas = {name: conn.execute(f"PRAGMA {name}").fetchone()[0] for name in SQLITE_PRAGMAS}
    finally:
        conn.close()
    return {"sqlite_version": sqlite3.sqlite_version, "pragmas": pragmas}


def postgres_settings(url: str) -> dict[str, Any]:
    """Server version and every setting that differs from its built-in default."""
    with psycopg.connect(url, autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        rows = conn.execute(
            "SELECT name, current_setting(name) FROM pg_settings"
            " WHERE source NOT IN ('default', 'override', 'client', 'session')"
            " ORDER BY name").fetchall()
        conn_kind = "unix socket" if conn.info.host.startswith("/") else f"tcp {conn.info.host}"
    return {"server_version": version[0] if version else None, "connection": conn_kind,
            "non_default_settings": dict(rows)}


def cpu_busy(seconds: float = 1.0) -> float:
    """Share of all cores busy over ``seconds`` (from /proc/stat; 0.0 where unknown)."""
    def sample() -> tuple[int, int]:
        try:
            with open("/proc/stat", encoding="ascii") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
        except OSError:
            return 0, 0
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return sum(fields), idle

    total0, idle0 = sample()
    time.sleep(seconds)
    total1, idle1 = sample()
    spent = total1 - total0
    return round(1 - (idle1 - idle0) / spent, 3) if spent > 0 else 0.0


def wait_quiet(threshold: float, max_wait: float) -> float:
    """Wait until other processes leave the machine mostly idle (the benchmark shares
    it), at most ``max_wait`` seconds; returns the busy share seen last."""
    deadline = time.monotonic() + max_wait
    busy = cpu_busy()
    while busy > threshold and time.monotonic() < deadline:
        busy = cpu_busy(2.0)
    return busy
