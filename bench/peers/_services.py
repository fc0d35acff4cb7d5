"""The services the peers need: Redis (the local one if it answers, else a private
``redis-server`` on a free port, installed from Debian's packages when missing) and
PostgreSQL: by default a private cluster with PostgreSQL's default settings, as
``python -m bench`` uses (the machine's own server runs with autovacuum off, and other
work may share it), in which every system gets a scratch database made anew before
each run."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

LOCAL_REDIS = ("127.0.0.1", 6379)
LOCAL_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"
#: Redis database the peers use (flushed before each run): not the default 0.
REDIS_DB = 15


def _redis_command(host: str, port: int, *commands: str, timeout: float = 2.0) -> str:
    """Send inline commands; return the last reply's text (a tiny RESP client)."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall("".join(c + "\r\n" for c in commands).encode())
        data = b""
        replies = 0
        while replies < len(commands):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
            replies = _complete_replies(data)
        return data.decode(errors="replace")


def _complete_replies(data: bytes) -> int:
    """How many whole replies ``data`` holds (simple, error, integer and bulk ones)."""
    count, pos = 0, 0
    while pos < len(data):
        end = data.find(b"\r\n", pos)
        if end < 0:
            break
        if data[pos:pos + 1] == b"$":
            size = int(data[pos + 1:end])
            stop = end + 2 + max(size, 0) + (2 if size >= 0 else 0)
            if stop > len(data):
                break
            pos = stop
        else:
            pos = end + 2
        count += 1
    return count


def redis_answers(host: str, port: int) -> bool:
    try:
        return "+PONG" in _redis_command(host, port, "PING", timeout=1.0)
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _redis_server() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    subprocess.run(["apt-get", "install", "-y", "-q", "redis-server"], check=True,
                   capture_output=True, timeout=600)
    return shutil.which("redis-server") or "/usr/bin/redis-server"


def _version(host: str, port: int) -> str | None:
    for line in _redis_command(host, port, "INFO server").splitlines():
        if line.startswith("redis_version:"):
            return line.split(":", 1)[1].strip()
    return None


@contextlib.contextmanager
def redis() -> Iterator[dict[str, Any]]:
    """``{"url", "source", "version"}`` of the Redis the peers use, for the whole run."""
    host, port = LOCAL_REDIS
    if redis_answers(host, port):
        yield {"url": f"redis://{host}:{port}/{REDIS_DB}", "version": _version(host, port),
               "source": f"the local Redis at {host}:{port} (database {REDIS_DB})"}
        return
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="conveyor-peers-redis-") as workdir:
        proc = subprocess.Popen([_redis_server(), "--port", str(port), "--bind", host,
                                 "--save", "", "--appendonly", "no", "--dir", workdir],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while not redis_answers(host, port):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start")
                time.sleep(0.05)
            yield {"url": f"redis://{host}:{port}/{REDIS_DB}", "version": _version(host, port),
                   "source": f"a redis-server started for this run on {host}:{port}"
                             " (no Redis answered at 127.0.0.1:6379)"}
        finally:
            proc.terminate()
            proc.wait(30)


def flush_redis(url: str) -> None:
    """Empty the peers' Redis database before a run."""
    rest = url.split("//", 1)[1]
    hostport, db = rest.split("/", 1)
    host, port = hostport.rsplit(":", 1)
    reply = _redis_command(host, int(port), f"SELECT {db}", "FLUSHDB")
    if "-ERR" in reply:
        raise RuntimeError(f"FLUSHDB on {url}: {reply.strip()}")


@contextlib.contextmanager
def postgres(choice: str, log: Callable[[str], object] = print) -> Iterator[tuple[str, str]]:
    """``(admin URL, what it is)`` for the run. ``private``: a cluster started for the run
    with PostgreSQL's default settings (the local server when none can be started);
    ``local``: the server at 127.0.0.1:5432; else ``choice`` is the admin URL."""
    if choice not in ("private", "local"):
        yield choice, "the server given by --pg-admin"
        return
    local = (LOCAL_POSTGRES, "the local server at 127.0.0.1:5432 (its own settings)")
    if choice == "local":
        yield local
        return
    from tests._pg import PostgresUnavailable, ThrowawayCluster, find_pg_bindir

    bindir = find_pg_bindir()
    cluster = ThrowawayCluster(bindir, settings="") if bindir else None
    try:
        admin = cluster.start() if cluster else None
    except PostgresUnavailable as exc:
        log(f"no private PostgreSQL cluster ({exc}): the local server instead")
        admin = None
    if cluster is None or admin is None:
        yield local
        return
    try:
        yield admin, ("a private cluster started for this run (initdb, PostgreSQL's default "
                      "settings, on the machine's disk)")
    finally:
        cluster.stop()


def database_url(admin_url: str, name: str) -> str:
    return make_conninfo(admin_url, dbname=name)


def as_url(conninfo: str) -> str:
    """A ``postgresql://`` URL of a conninfo (asyncpg and some peers take only URLs)."""
    params = conninfo_to_dict(conninfo)
    host, port = params.get("host", "127.0.0.1"), params.get("port", "5432")
    user, db = params.get("user", "postgres"), params.get("dbname", "postgres")
    password = params.get("password")
    auth = f"{user}:{password}" if password else f"{user}"
    return f"postgresql://{auth}@{host}:{port}/{db}"


def fresh_database(admin_url: str, name: str) -> str:
    """Drop and create ``name`` (it must start with ``conveyor_peer_``); its URL."""
    if not name.startswith("conveyor_peer_"):
        raise ValueError(f"refusing to drop {name!r}: not a scratch database of the peers")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return as_url(database_url(admin_url, name))


def drop_database(admin_url: str, name: str) -> None:
    if name.startswith("conveyor_peer_"):
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))
