"""SQLite: a batch of acks with dependents writes no temporary file.

An ack batch runs as one ``executemany`` of an UPDATE whose triggers settle each job's
dependents, inside a savepoint. SQLite journals every page that batch first touches
(the savepoint's sub-journal, each statement's journal). With the default
``temp_store`` those journals spill past 64 KiB to temporary files: created, written
and deleted again on every batch. Measured in a worker draining a 10 x 1,000 DAG, that
made each ack with dependents cost about 3x more (``bench/analysis.md``). Conveyor's
connections keep temporary storage in memory; this test runs such a batch in a child
process whose SQLite temp directory is a fresh empty directory, and checks that nothing
was ever created there (its mtime moves on any create or delete).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = textwrap.dedent("""
    import asyncio, os, sys
    from conveyor import JobState, Workflow
    from conveyor._storage import (JobAck, JobAckManyParams, JobFetchAvailableParams,
                                   WakeHub, create_storage)
    from tests.apps.workflows_app import build

    url = sys.argv[1]
    tasks = build(url)
    tasks.app.migrate()
    wf, before = Workflow(), []
    for layer in range(3):  # 3 x 200: each job of a layer waits on two of the one before
        row = [wf.add(tasks.step.job(f"{layer}.{i}"),
                      depends_on=[before[i], before[(i + 1) % 200]] if before else [])
               for i in range(200)]
        before = row
    tasks.app.enqueue_workflow(wf)
    tasks.app.close()

    async def main() -> None:
        storage = create_storage(url, WakeHub())
        await storage.open()
        try:
            claimed = await storage.job_fetch_available(
                JobFetchAvailableParams("wf", 200, "node", 30.0))
            os.utime(os.environ["SQLITE_TMPDIR"], (1, 1))  # what opening may have done
            done = await storage.job_ack_many(JobAckManyParams(
                [JobAck(j.id, j.lease_token or 0, JobState.COMPLETED, result_json="1")
                 for j in claimed], "node"))
            print(len(claimed), len(done))
        finally:
            await storage.close()

    asyncio.run(main())
""")


def test_an_ack_batch_with_dependents_creates_no_temporary_file(tmp_path: Path) -> None:
    temp = tmp_path / "sqlite-temp"
    temp.mkdir()
    env = {**os.environ, "SQLITE_TMPDIR": str(temp), "TMPDIR": str(temp)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, f"sqlite:///{tmp_path / 'jobs.db'}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["200", "200"]  # the batch ran, every ack applied
    assert os.stat(temp).st_mtime == 1, (
        f"SQLite created temporary files during the ack batch: {sorted(os.listdir(temp))}")
