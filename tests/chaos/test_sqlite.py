"""Scenario 11 (SQLite only): four worker processes and a reading, enqueuing user process
on one file; ``kill -9`` of workers while they write."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from . import app as chaos
from .harness import ROOT, Cluster, Observer, Result, all_final, check, enqueue, pick, rng
from .test_processes import completed, finish


def test_four_workers_and_a_reader_on_one_file(sqlite_url: str, chaos_dir: Path, started: float,
                                               request: pytest.FixtureRequest) -> None:
    """Scenario 11: no "database is locked" reaches the user or a worker, no job is
    claimed twice, every committed job (initial or enqueued meanwhile) survives."""
    n, kills, workers = pick(1500, 10_000), pick(6, 40), 4
    r = rng(request.node.nodeid)
    ids = enqueue(sqlite_url, [chaos.work.job(0.002) for _ in range(n)])
    user_dir = chaos_dir / "user"
    user_dir.mkdir()
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    with Cluster(sqlite_url, chaos_dir) as cluster, Observer(sqlite_url) as observer:
        for _ in range(workers):
            cluster.start("-c", "8")
        user = subprocess.Popen([sys.executable, "-m", "tests.chaos.reader", sqlite_url,
                                 str(user_dir)], cwd=ROOT, env=env)
        try:
            cluster.wait(lambda: len(cluster.events()) >= 50, 30, "the workers to start jobs")
            # The faults come while the user works: wait until it has enqueued once (a user
            # slow to start under load saw the stop file first and wrote nothing).
            cluster.wait(lambda: (user_dir / "enqueued.txt").exists(), 60,
                         "the user process to enqueue")
            for _ in range(kills):
                time.sleep(r.uniform(0.1, 0.5))  # a random moment: the fault, not a wait
                cluster.kill(r.choice(cluster.alive()))
                cluster.start("-c", "8")
            (user_dir / "stop").touch()
            assert user.wait(timeout=60) == 0
        finally:
            if user.poll() is None:
                user.kill()
                user.wait(timeout=10)
        added = [int(x) for x in (user_dir / "enqueued.txt").read_text().split()]
        cluster.wait(lambda: all_final(sqlite_url, n + len(added)), pick(90, 600),
                     "every job to finish")
        logs = cluster.all_output()
    errors = (user_dir / "errors.txt").read_text()
    assert errors == "", f"the user saw errors:\n{errors[:2000]}"
    assert "locked" not in logs.lower(), "a worker saw 'database is locked'"
    outcome = check(sqlite_url, cluster.events(), ids + added, observer, completed)
    reads = int((user_dir / "reads.txt").read_text())
    finish(Result(11, "SQLite: 4 workers and a user process on one file, kill -9", "sqlite",
                  n + len(added), f"{cluster.kills} x SIGKILL of a worker mid-write; the user "
                  f"made {reads} reads and enqueued {len(added)} jobs meanwhile",
                  request.node.nodeid, outcome,
                  notes="no 'database is locked' reached the user or a worker; no job ran "
                        "twice for one attempt"), started)
