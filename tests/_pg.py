"""Find a PostgreSQL server for the test suite.

Tried in order:

1. ``CONVEYOR_TEST_POSTGRES_URL``: an explicit URL. If it does not work that is an error,
   never a silent fallback to another server. ``skip`` (or ``none``/``off``/``0``) turns
   the Postgres tests off on purpose.
2. A server on 127.0.0.1:5432, as user ``postgres`` then ``root`` (database ``postgres``).
3. A throwaway cluster: ``initdb`` into a temporary directory (as the ``postgres`` user when
   running as root), started on a free port, stopped and deleted by ``shutdown()``.

``get()`` runs the discovery once per process and returns a ``Discovery``: an admin URL
(to the ``postgres`` database, with the right to create databases) or ``None`` and why.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import pwd
import secrets
import shlex
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg

ENV_URL = "CONVEYOR_TEST_POSTGRES_URL"
ENV_REQUIRE = "CONVEYOR_REQUIRE_POSTGRES"
DISABLED_VALUES = frozenset({"skip", "none", "off", "0", "no", "false"})
LOCAL_HOST = "127.0.0.1"
LOCAL_PORT = 5432
LOCAL_USERS = ("postgres", "root")
CONNECT_TIMEOUT = 3  # seconds; libpq's minimum useful value is 2
START_TIMEOUT = 30.0  # seconds for a throwaway cluster to accept connections


class PostgresUnavailable(Exception):
    """A candidate server cannot be used; the message says why."""


@dataclasses.dataclass
class Discovery:
    """The outcome of discovery: a usable admin URL, or None and the reason."""

    admin_url: str | None
    #: How the server was found (or what was tried), for the report header.
    source: str
    #: Why no server is usable; empty when ``admin_url`` is set.
    reason: str = ""
    #: True when an explicit setting is broken: Postgres tests must error, never skip.
    fatal: bool = False

    def describe(self) -> str:
        if self.admin_url is not None:
            return f"{redact(self.admin_url)} ({self.source})"
        return f"NONE ({self.reason})"


def required() -> bool:
    """True when ``CONVEYOR_REQUIRE_POSTGRES=1``: missing Postgres fails the run."""
    return os.environ.get(ENV_REQUIRE, "").strip().lower() in {"1", "true", "yes", "on"}


def redact(url: str) -> str:
    """The URL with any password replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    userinfo, _, hostinfo = parts.netloc.rpartition("@")
    user = userinfo.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{hostinfo}"))


def with_database(url: str, dbname: str) -> str:
    """The same server and credentials as ``url``, pointing at database ``dbname``."""
    return urlunsplit(urlsplit(url)._replace(path="/" + quote(dbname, safe="")))


@contextlib.contextmanager
def scratch_database(admin_url: str, prefix: str) -> Iterator[str]:
    """A new, empty database on ``admin_url``'s server (nothing migrated), dropped
    (WITH FORCE) afterwards; its name is ``prefix`` and a random suffix."""
    from psycopg import sql

    name = f"{prefix}_{secrets.token_hex(6)}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield with_database(admin_url, name)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))


#: Databases of ``reusable_database`` free for the next caller, by admin URL, and every
#: one this process made (dropped by ``shutdown()``).
_free_databases: dict[str, list[str]] = {}
_made_databases: list[tuple[str, str]] = []


@contextlib.contextmanager
def reusable_database(admin_url: str, prefix: str) -> Iterator[str]:
    """Like ``scratch_database`` (a new, empty database, nothing migrated), but kept for
    the next caller of this process instead of dropped: emptied (its connections ended,
    its schemas dropped, ``public`` made anew) and dropped by ``shutdown()``. DROP DATABASE
    forces a checkpoint of the whole server: seconds a test under load. Only for tests that
    keep to schemas and change no setting of the database itself."""
    from psycopg import sql

    free = _free_databases.setdefault(admin_url, [])
    if free:
        name = free.pop()
    else:
        name = f"{prefix}_{secrets.token_hex(6)}"
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        _made_databases.append((admin_url, name))
    url = with_database(admin_url, name)
    yield url
    try:
        _empty_database(admin_url, url, name)
    except psycopg.Error:
        return  # not reused; shutdown() drops it
    free.append(name)


def _empty_database(admin_url: str, url: str, name: str) -> None:
    """End every other connection to ``name``, then drop its schemas but the system ones
    and make ``public`` as a new database has it."""
    from psycopg import sql

    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                      " WHERE datname = %s AND pid <> pg_backend_pid()", (name,))
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        schemas = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%'"
            " AND nspname <> 'information_schema'").fetchall()
        for (schema,) in schemas:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
        conn.execute("CREATE SCHEMA public AUTHORIZATION pg_database_owner")
        conn.execute("GRANT USAGE ON SCHEMA public TO PUBLIC")


def _drop_made_databases() -> None:
    from psycopg import sql

    while _made_databases:
        admin_url, name = _made_databases.pop()
        with contextlib.suppress(psycopg.Error), psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))
    _free_databases.clear()


def check_admin(url: str) -> None:
    """Connect, and check this role may create databases; raise PostgresUnavailable."""
    try:
        with psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT, autocommit=True) as conn:
            row = conn.execute(
                "SELECT rolsuper OR rolcreatedb FROM pg_roles WHERE rolname = current_user"
            ).fetchone()
    except psycopg.Error as exc:
        raise PostgresUnavailable(f"cannot connect to {redact(url)}: {_one_line(exc)}") from exc
    if row is None or not row[0]:
        raise PostgresUnavailable(f"{redact(url)}: the role may not create databases")


# -- (1) explicit URL ------------------------------------------------------------------------


def _from_env(value: str) -> Discovery:
    if value.strip().lower() in DISABLED_VALUES:
        return Discovery(None, f"{ENV_URL}={value}", f"disabled by {ENV_URL}={value}")
    if urlsplit(value).scheme.lower() not in ("postgresql", "postgres"):
        return Discovery(
            None,
            f"${ENV_URL}",
            f"{ENV_URL} must be a postgresql://user@host:port/db URL, got {value!r}",
            fatal=True,
        )
    try:
        check_admin(value)
    except PostgresUnavailable as exc:
        return Discovery(None, f"${ENV_URL}", f"${ENV_URL} is set but unusable: {exc}", True)
    return Discovery(value, f"from ${ENV_URL}")


# -- (2) the local server --------------------------------------------------------------------


def probe_local_server(host: str | None = None, port: int | None = None) -> tuple[str | None, str]:
    """The admin URL of a server on ``host:port`` (users postgres, then root), or why not."""
    host, port = host or LOCAL_HOST, port or LOCAL_PORT
    failures: list[str] = []
    for user in LOCAL_USERS:
        url = f"postgresql://{user}@{host}:{port}/postgres"
        try:
            check_admin(url)
        except PostgresUnavailable as exc:
            failures.append(str(exc))
            continue
        return url, ""
    return None, "; ".join(failures)


# -- (3) a throwaway cluster -----------------------------------------------------------------


def find_pg_bindir() -> Path | None:
    """A directory holding both ``initdb`` and ``pg_ctl``: PATH first, newest version next."""
    candidates: list[Path] = []
    for tool in ("initdb", "pg_ctl"):
        found = shutil.which(tool)
        if found:
            candidates += [Path(found).parent, Path(found).resolve().parent]

    def version(bindir: Path) -> tuple[int, ...]:
        try:
            return tuple(int(p) for p in bindir.parent.name.split("."))
        except ValueError:
            return (0,)

    installed = Path("/usr/lib/postgresql")
    if installed.is_dir():
        candidates += sorted(installed.glob("*/bin"), key=version, reverse=True)
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "pg_ctl").is_file():
            return bindir
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOCAL_HOST, 0))
        port: int = sock.getsockname()[1]
        return port


class ThrowawayCluster:
    """A private PostgreSQL cluster in a temporary directory. Example::

    cluster = ThrowawayCluster(find_pg_bindir())
    url = cluster.start()
    ...
    cluster.stop()
    """

    #: Settings for a test server: durability off, tests do not need it.
    FAST = "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"

    def __init__(self, bindir: Path, settings: str = FAST) -> None:
        self.bindir = bindir
        self.settings = settings
        self.tmpdir: Path | None = None
        self.port: int | None = None
        self._started = False
        self._run_as = self._non_root_user()

    @staticmethod
    def _non_root_user() -> str | None:
        """The user to run initdb/pg_ctl as (None: ourselves); raises if root has none."""
        if os.geteuid() != 0:
            return None
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            raise PostgresUnavailable(
                "running as root (initdb refuses) and there is no 'postgres' user to run it as"
            ) from None
        if not (shutil.which("runuser") or shutil.which("su")):
            raise PostgresUnavailable("running as root and neither runuser nor su is available")
        return "postgres"

    @property
    def datadir(self) -> Path:
        assert self.tmpdir is not None
        return self.tmpdir / "data"

    @property
    def logfile(self) -> Path:
        assert self.tmpdir is not None
        return self.tmpdir / "postgres.log"

    def _run(self, argv: list[str], timeout: float) -> None:
        if self._run_as is not None:
            runuser = shutil.which("runuser")
            if runuser:
                argv = [runuser, "-u", self._run_as, "--", *argv]
            else:
                argv = ["su", self._run_as, "-s", "/bin/sh", "-c", shlex.join(argv)]
        try:
            proc = subprocess.run(
                argv,
                cwd=self.tmpdir,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PostgresUnavailable(f"{Path(argv[0]).name} failed: {exc}") from exc
        if proc.returncode != 0:
            output = (proc.stderr or proc.stdout).strip().splitlines()
            tail = " | ".join(output[-5:])
            raise PostgresUnavailable(f"{shlex.join(argv)} exited with {proc.returncode}: {tail}")

    def start(self) -> str:
        """initdb and start; return the admin URL. Cleans up after itself on failure."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> str:
        self.tmpdir = Path(tempfile.mkdtemp(prefix="conveyor-pg-"))
        if self._run_as is not None:
            entry = pwd.getpwnam(self._run_as)
            os.chown(self.tmpdir, entry.pw_uid, entry.pw_gid)
        self._run(
            [
                str(self.bindir / "initdb"),
                "-D", str(self.datadir),
                "-U", "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ],
            timeout=120,
        )  # fmt: skip
        last_error: PostgresUnavailable | None = None
        for _ in range(3):  # another process may grab the free port between probe and bind
            self.port = _free_port()
            options = (
                f"-p {self.port} -k {self.tmpdir} -c listen_addresses={LOCAL_HOST} "
                + self.settings
            )
            try:
                self._run(
                    [
                        str(self.bindir / "pg_ctl"),
                        "-D", str(self.datadir),
                        "-l", str(self.logfile),
                        "-o", options,
                        "-w", "-t", str(int(START_TIMEOUT)),
                        "start",
                    ],
                    timeout=START_TIMEOUT + 10,
                )  # fmt: skip
            except PostgresUnavailable as exc:
                last_error = exc
                continue
            self._started = True
            url = f"postgresql://postgres@{LOCAL_HOST}:{self.port}/postgres"
            self._wait_ready(url)
            return url
        assert last_error is not None
        raise PostgresUnavailable(f"{last_error}; log: {self._log_tail()}")

    def _wait_ready(self, url: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                check_admin(url)
                return
            except PostgresUnavailable:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.1)

    def _log_tail(self) -> str:
        try:
            lines = self.logfile.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(lines[-5:])

    def stop(self) -> None:
        """Stop the server and delete its directory; safe to call twice."""
        if self._started:
            self._started = False
            with contextlib.suppress(PostgresUnavailable):  # already gone: delete its files
                self._run(
                    [str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", "immediate",
                     "-w", "stop"],
                    timeout=60,
                )  # fmt: skip
        tmpdir, self.tmpdir = self.tmpdir, None
        if tmpdir is not None:
            shutil.rmtree(tmpdir, ignore_errors=True)


def start_throwaway() -> tuple[str, ThrowawayCluster]:
    """Start a throwaway cluster; raise PostgresUnavailable saying why it cannot be."""
    bindir = find_pg_bindir()
    if bindir is None:
        raise PostgresUnavailable("no initdb/pg_ctl on PATH or under /usr/lib/postgresql/*/bin")
    cluster = ThrowawayCluster(bindir)
    return cluster.start(), cluster


# -- discovery -------------------------------------------------------------------------------


_lock = threading.Lock()
_result: Discovery | None = None
_cleanups: list[Callable[[], None]] = []


def discover() -> Discovery:
    """Run discovery now (no caching). Prefer ``get()``."""
    env_value = os.environ.get(ENV_URL)
    if env_value:
        return _from_env(env_value)
    url, local_failure = probe_local_server()
    if url is not None:
        return Discovery(url, f"local server on {LOCAL_HOST}:{LOCAL_PORT}")
    try:
        url, cluster = start_throwaway()
    except PostgresUnavailable as exc:
        return Discovery(
            None,
            "nothing",
            f"no server on {LOCAL_HOST}:{LOCAL_PORT} ({local_failure}) and no throwaway "
            f"cluster ({exc}); set {ENV_URL}=postgresql://... to use another server",
        )
    _cleanups.append(cluster.stop)
    return Discovery(url, f"throwaway cluster in {cluster.tmpdir}, stopped at exit")


def get() -> Discovery:
    """Discovery, run once per process."""
    global _result
    with _lock:
        if _result is None:
            _result = discover()
        return _result


def peek() -> Discovery | None:
    """The discovery result if it has run, without running it."""
    return _result


def shutdown() -> None:
    """Stop and delete any throwaway cluster this process started (and forget its URL)."""
    global _result
    with _lock:
        _drop_made_databases()
        if _cleanups:
            _result = None
        while _cleanups:
            _cleanups.pop()()


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


atexit.register(shutdown)
