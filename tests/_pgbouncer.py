"""Start Debian's PgBouncer in transaction mode in front of the test PostgreSQL.

``start(upstream_url)`` writes an ini and a userlist into a temporary directory, runs
``pgbouncer`` in the foreground on a free port (``pool_mode = transaction``,
``auth_type = trust``, a few server connections so that clients share them), waits for
it with a deadline and stops it on exit. No system-wide service is used or left running.

``$CONVEYOR_PGBOUNCER`` names another binary. Without one the tests skip loudly (a
banner in the summary); with ``CONVEYOR_REQUIRE_PGBOUNCER=1`` (CI, ``.ci/run``) they fail.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

ENV_REQUIRE = "CONVEYOR_REQUIRE_PGBOUNCER"
ENV_BINARY = "CONVEYOR_PGBOUNCER"
#: Marks a skip or failure as caused by missing PgBouncer (for the summary's count).
MISSING = "PgBouncer unavailable:"
START_TIMEOUT = 15.0
#: Server connections per database and user: fewer than the app's pool, so that client
#: connections really share server connections (what breaks prepared statements).
POOL_SIZE = 4


def required() -> bool:
    return os.environ.get(ENV_REQUIRE, "").strip().lower() in {"1", "true", "yes", "on"}


def binary() -> str | None:
    """``$CONVEYOR_PGBOUNCER`` (a path) when set, else ``pgbouncer`` on PATH or in
    /usr/sbin (Debian's package puts it there)."""
    chosen = os.environ.get(ENV_BINARY, "").strip()
    if chosen:
        return chosen if os.access(chosen, os.X_OK) else None
    found = shutil.which("pgbouncer")
    if found is None and os.access("/usr/sbin/pgbouncer", os.X_OK):
        found = "/usr/sbin/pgbouncer"
    return found


def skip_or_fail() -> None:
    """Called when the binary is missing: a loud skip, or a failure when required."""
    message = (f"{MISSING} no pgbouncer binary ($CONVEYOR_PGBOUNCER, PATH, /usr/sbin) "
               f"(apt-get install pgbouncer); {ENV_REQUIRE}=1 makes this a failure")
    if required():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@dataclasses.dataclass(frozen=True)
class PgBouncer:
    port: int
    log: Path

    def url_for(self, direct_url: str) -> str:
        """``direct_url`` (user, password and database kept) through this PgBouncer."""
        parts = urlsplit(direct_url)
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@127.0.0.1:{self.port}" if userinfo else f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _write_config(directory: Path, upstream: str, port: int) -> Path:
    parts = urlsplit(upstream)
    user = parts.username or "postgres"
    password = parts.password or ""
    (directory / "userlist.txt").write_text(f'"{user}" "{password}"\n')
    ini = directory / "pgbouncer.ini"
    ini.write_text("\n".join([
        "[databases]",
        f"* = host={parts.hostname or '127.0.0.1'} port={parts.port or 5432}",
        "[pgbouncer]",
        "listen_addr = 127.0.0.1",
        f"listen_port = {port}",
        "unix_socket_dir =",
        "auth_type = trust",
        f"auth_file = {directory / 'userlist.txt'}",
        "pool_mode = transaction",
        f"default_pool_size = {POOL_SIZE}",
        "max_client_conn = 500",
        "ignore_startup_parameters = extra_float_digits,options",
        "",
    ]))
    for path in (directory, directory / "userlist.txt", ini):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return ini


def _wait_ready(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"pgbouncer exited with {proc.returncode}: {log.read_text()}")
        try:
            with psycopg.connect(url, connect_timeout=2, autocommit=True) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.Error as exc:
            last = str(exc).strip()
        time.sleep(0.05)
    raise RuntimeError(f"pgbouncer not ready within {START_TIMEOUT}s: {last}\n{log.read_text()}")


@contextlib.contextmanager
def start(upstream_url: str) -> Iterator[PgBouncer]:
    """A PgBouncer in transaction mode in front of ``upstream_url``'s server."""
    exe = binary()
    if exe is None:
        skip_or_fail()
        raise AssertionError("unreachable")
    directory = Path(tempfile.mkdtemp(prefix="conveyor-pgbouncer-"))
    port = _free_port()
    ini = _write_config(directory, upstream_url, port)
    command = [exe, str(ini)]
    if os.geteuid() == 0:  # pgbouncer refuses to run as root
        command[1:1] = ["-u", pwd.getpwnam("postgres").pw_name]
    log = directory / "pgbouncer.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    bouncer = PgBouncer(port, log)
    try:
        _wait_ready(proc, bouncer.url_for(upstream_url), log)
        yield bouncer
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)


def report_header() -> str:
    exe = binary()
    if exe is not None:
        return f"pgbouncer: {exe}"
    outcome = "FAIL" if required() else "be SKIPPED"
    return f"pgbouncer: NONE !!! PgBouncer tests will {outcome} (apt-get install pgbouncer) !!!"


def terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """A loud banner when PgBouncer tests were skipped or failed for want of the binary."""
    reports = [rep for category in ("skipped", "error", "failed")
               for rep in terminalreporter.stats.get(category, [])
               if MISSING in str(getattr(rep, "longrepr", ""))]
    if not reports:
        return
    title = "PGBOUNCER TESTS WERE SKIPPED" if not required() else "PGBOUNCER TESTS FAILED"
    terminalreporter.write_sep("!", title, red=True, bold=True)
    terminalreporter.write_line(
        f"{len(reports)} test(s): no pgbouncer binary. Fix: apt-get install pgbouncer "
        f"(the tests start their own; no service needed). {ENV_REQUIRE}=1 makes this fail.")
    terminalreporter.write_sep("!", title, red=True, bold=True)
