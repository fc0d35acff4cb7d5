"""A PostgreSQL restart between two calls (issue 28 defect 8): every pooled connection
the server hung up on is noticed at checkout and replaced, so the first call after the
restart succeeds instead of raising ``DatabaseUnavailableError``.

The shared server at 127.0.0.1:5432 is never restarted: the test starts a private
cluster (``initdb``/``pg_ctl`` in a temporary directory, ``tests/_pg.py``) and restarts
that one with ``pg_ctl restart -m fast``, which ends every session with FATAL 57P01.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import pytest

from conveyor import Conveyor, JobState

from . import _pg
from .conftest import PG_MISSING, migrate

pytestmark = pytest.mark.postgres


class _Restartable(_pg.ThrowawayCluster):
    def restart(self) -> None:
        # -l again: without it the server would keep our output pipe open forever.
        self._run([str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-l", str(self.logfile),
                   "-m", "fast", "-w", "-t", "30", "restart"], timeout=60)


@pytest.fixture
def private_server() -> Iterator[tuple[_Restartable, str]]:
    bindir = _pg.find_pg_bindir()
    if bindir is None:
        message = f"{PG_MISSING} a restart test needs initdb/pg_ctl for a private cluster"
        if _pg.required():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    server = _Restartable(bindir)
    try:
        url = server.start()
    except _pg.PostgresUnavailable as exc:
        if _pg.required():
            pytest.fail(f"{PG_MISSING} {exc}", pytrace=False)
        pytest.skip(f"{PG_MISSING} {exc}")
    try:
        migrate(url)
        yield server, url
    finally:
        server.stop()


def test_every_call_after_a_restart_succeeds(private_server: tuple[_Restartable, str]) -> None:
    """Sync enqueues (their own connections), async enqueues and reads (the pool) and a
    worker's acks (the reserved pool), each on connections opened before the restart."""
    server, url = private_server
    app = Conveyor(url)

    @app.task
    def add(a: int, b: int) -> int:
        return a + b

    async def warm_and_check(stage: str) -> list[int]:
        # Several at once so that the pool holds several connections to go stale.
        jobs = await asyncio.gather(*(add.enqueue_async(i, 1) for i in range(6)))
        assert (await app.count_jobs_async())["available"] >= 6, stage
        return [j.id for j in jobs]

    with contextlib.closing(app):
        before = [add.enqueue(i, 0).id for i in range(6)]
        before += app._sync(warm_and_check("before"))
        server.restart()
        after = [add.enqueue(i, 2).id for i in range(6)]  # no call may fail
        after += app._sync(warm_and_check("after"))
        assert len(app.drain()) == len(before) + len(after)
        for job_id in before + after:
            job = app.get_job(job_id)
            assert job is not None and job.state is JobState.COMPLETED, job


def test_a_worker_acks_after_a_restart(private_server: tuple[_Restartable, str]) -> None:
    """The reserved pool (acks, heartbeats) too: a job claimed before the restart is
    acknowledged after it on the first try."""
    server, url = private_server
    app = Conveyor(url)

    @app.task
    def one() -> int:
        return 1

    async def main() -> None:
        storage = await app.storage()
        first = await one.enqueue_async()
        assert len(await app.drain_async()) == 1
        server.restart()
        second = await one.enqueue_async()
        assert len(await app.drain_async()) == 1
        for job_id in (first.id, second.id):
            job = await app.get_job_async(job_id)
            assert job is not None and job.state is JobState.COMPLETED, job
        assert storage is await app.storage()
        await app.close_async()

    asyncio.run(main())
