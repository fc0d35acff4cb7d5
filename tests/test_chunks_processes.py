"""A `conveyor worker` process killed with SIGKILL in the middle of a chunk, on both
backends: the chunk's jobs are rescued once their leases run out and run again on
another worker; none is lost, and each counts the lost run as an attempt."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from conveyor import Chunk, ChunkJob, Conveyor, JobState

from ._runtime_util import FAST, all_final, run_worker_until
from .conftest import WaitFor

ROOT = Path(__file__).resolve().parent.parent


def test_a_worker_killed_mid_chunk_loses_no_job(db_url: str, tmp_path: Path,
                                               wait_for: WaitFor) -> None:
    ledger = tmp_path / "ledger.txt"
    env = {**os.environ, "CONVEYOR_URL": db_url, "CONVEYOR_TEST_LEDGER": str(ledger),
           "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    app = Conveyor(db_url)  # the next deploy: the same task, now quick

    @app.task(name="slow_chunk", chunk=Chunk(size=10, wait=0.2), max_attempts=3)
    def rerun(batch: list[ChunkJob]) -> list[int]:
        return [j.id for j in batch]

    jobs = app.enqueue_many([rerun.job("slow") for _ in range(6)])
    cmd = [sys.executable, "-m", "conveyor", "worker", "tests.apps.chunks_app:app",
           "--lease-ttl", "2", "--heartbeat-interval", "0.2", "-c", "1"]
    with open(tmp_path / "worker.log", "wb") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: ledger.exists() and ledger.read_text().strip(), timeout=60,
                 message="the chunk to start in the worker process")
        ran = [int(i) for i in ledger.read_text().split()[:-1]]
        assert sorted(ran) == sorted(j.id for j in jobs)
        assert all(app.get_job(j.id).state is JobState.RUNNING for j in jobs)  # type: ignore[union-attr]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)

    async def main() -> None:
        await run_worker_until(app, all_final(app), config=FAST, timeout=60)
        for job in jobs:
            got = await app.get_job_async(job.id)
            assert got is not None and got.state is JobState.COMPLETED, got
            assert got.result == job.id and got.attempt == 2
        await app.close_async()

    asyncio.run(main())
