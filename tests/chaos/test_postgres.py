"""Scenarios 5 and 6 (PostgreSQL only): the server restarted under load, and the LISTEN
connection alone terminated.

The shared server on 127.0.0.1:5432 is never restarted: scenario 5 runs on a throwaway
cluster of its own, and scenario 6 terminates only LISTEN backends of this session's
own test database.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import NoReturn

import psycopg
import pytest
from psycopg import sql

from .. import _pg
from ..conftest import PG_MISSING, migrate
from . import app as chaos
from .harness import (
    Cluster,
    Observer,
    Result,
    all_final,
    check,
    enqueue,
    execute,
    pick,
    query,
    rng,
    state_counts,
)
from .test_processes import completed, finish

LISTENERS = ("SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
             " AND query ILIKE 'LISTEN%%' AND pid <> pg_backend_pid()")


def listeners(url: str) -> set[int]:
    return {int(r[0]) for r in query(url, LISTENERS)}


def relistened(url: str, before: set[int], workers: int) -> bool:
    """Whether ``workers`` new backends (none of ``before``) are LISTENing."""
    return len(listeners(url) - before) == workers


def insert_silently(url: str, n: int) -> list[int]:
    """Insert ``work`` jobs with plain SQL: no NOTIFY, only polling can find them."""
    rows = query(url, "INSERT INTO conveyor_jobs (task, queue, args, max_attempts)"
                      " SELECT 'work', 'default', '[0.01]', 25 FROM generate_series(1, %s)"
                      " RETURNING id", [n])
    return [int(r[0]) for r in rows]


class Restartable(_pg.ThrowawayCluster):
    """A throwaway cluster this test may restart."""

    def restart(self) -> None:
        # -l again: without it the server would keep our output pipe open forever.
        self._run([str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-l", str(self.logfile),
                   "-m", "fast", "-w", "-t", "30", "restart"], timeout=60)


def unavailable(reason: str) -> NoReturn:
    """Skip loudly, or fail when ``CONVEYOR_REQUIRE_POSTGRES=1`` (as the conftest does)."""
    message = f"{PG_MISSING} {reason}"
    if _pg.required():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@contextlib.contextmanager
def throwaway_database() -> Iterator[tuple[Restartable, str]]:
    bindir = _pg.find_pg_bindir()
    if bindir is None:
        unavailable("scenario 5 needs initdb/pg_ctl for a private cluster to restart "
                    "(the shared server is never restarted)")
    try:
        server = Restartable(bindir)
        admin = server.start()
    except _pg.PostgresUnavailable as exc:
        unavailable(f"scenario 5 cannot start a private cluster to restart: {exc}")
    try:
        name = f"chaos_{secrets.token_hex(4)}"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        url = _pg.with_database(admin, name)
        migrate(url)
        yield server, url
    finally:
        server.stop()


# -- 5 --------------------------------------------------------------------------------------


def test_postgres_restart_under_load(chaos_dir: Path, started: float,
                                     request: pytest.FixtureRequest) -> None:
    """Scenario 5: ``pg_ctl restart -m fast`` while two workers are busy: they reconnect
    with backoff, LISTEN comes back, nothing is lost; duplicates are bounded by the jobs
    in flight at each restart."""
    n, restarts, workers, slots = pick(300, 3000), pick(2, 6), 2, 10
    r = rng(request.node.nodeid)
    with throwaway_database() as (server, url):
        ids = enqueue(url, [chaos.work.job(r.uniform(0.02, 0.1)) for _ in range(n)])
        with Cluster(url, chaos_dir) as cluster, Observer(url) as observer:
            for _ in range(workers):
                cluster.start("-c", str(slots), lease_ttl=3.0, heartbeat=0.3)
            cluster.wait(lambda: len(listeners(url)) == workers, 30, "both workers to LISTEN")
            for _ in range(restarts):
                done = state_counts(url).get("completed", 0)

                def progress(d: int = done) -> bool:
                    return state_counts(url).get("completed", 0) > d + 20

                cluster.wait(progress, 60, "the workers to make progress")
                before = listeners(url)
                with observer.outage():  # its polls fail while the server is down
                    server.restart()
                    cluster.wait(partial(relistened, url, before, workers), 60,
                                 "both workers to LISTEN again after the restart")
            # Wake-ups work again: new jobs are picked up at once.
            late = enqueue(url, [chaos.work.job(0.01) for _ in range(20)])
            cluster.wait(lambda: all_final(url), pick(120, 600), "every job to finish")
            assert all(p.poll() is None for p in cluster.procs), "a worker died"
            logs = cluster.all_output()
        outcome = check(url, cluster.events(), ids + late, observer, completed)
    assert outcome.duplicates <= restarts * workers * slots
    assert "LISTEN connection lost" in logs
    finish(Result(5, "PostgreSQL restarted under load (pg_ctl restart -m fast)", "postgres",
                  n + 20, f"{restarts} x server restart, {workers} workers x {slots} slots",
                  request.node.nodeid, outcome,
                  notes=f"bound on duplicates: jobs in flight = {restarts * workers * slots}; "
                        "runs on a private throwaway cluster"), started)


# -- 6 --------------------------------------------------------------------------------------


def test_listen_connection_terminated(pg_url: str, chaos_dir: Path, started: float,
                                      request: pytest.FixtureRequest) -> None:
    """Scenario 6: ``pg_terminate_backend`` on the workers' LISTEN connections only:
    jobs inserted without any NOTIFY are still found by polling, and the listener
    reconnects (a new backend LISTENs)."""
    rounds, workers, per_round = pick(3, 10), 2, pick(30, 200)
    ids: list[int] = []
    terminated = 0
    with Cluster(pg_url, chaos_dir) as cluster, Observer(pg_url) as observer:
        for _ in range(workers):
            cluster.start("-c", "10")
        cluster.wait(lambda: len(listeners(pg_url)) == workers, 30, "both workers to LISTEN")
        for _ in range(rounds):
            before = listeners(pg_url)
            execute(pg_url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                            " WHERE datname = current_database() AND query ILIKE 'LISTEN%%'"
                            " AND pid <> pg_backend_pid()")
            terminated += len(before)
            batch = insert_silently(pg_url, per_round)
            ids += batch
            cluster.wait(partial(relistened, pg_url, before, workers), 30,
                         "the listeners to come back")
            cluster.wait(lambda: all_final(pg_url), 30, "the silent jobs to be polled")
        logs = cluster.all_output()
    outcome = check(pg_url, cluster.events(), ids, observer, completed)
    assert "LISTEN connection lost" in logs
    assert outcome.leases_lost == 0
    finish(Result(6, "LISTEN connection terminated (pg_terminate_backend)", "postgres",
                  len(ids), f"{terminated} LISTEN backends terminated over {rounds} rounds; "
                  "jobs inserted without NOTIFY", request.node.nodeid, outcome,
                  notes="jobs flow by polling meanwhile; the listener reconnects with backoff"),
           started)

