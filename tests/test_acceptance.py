"""Real `conveyor worker` processes, real signals, on both backends."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor, JobState

from ._signals import freeze_between_writes
from .apps import acceptance

ROOT = Path(__file__).resolve().parent.parent


class Cluster:
    """Starts worker processes against one database and cleans every one up, by pid."""

    def __init__(self, db_url: str, ledger: Path) -> None:
        self.db_url, self.ledger = db_url, ledger
        self.procs: list[subprocess.Popen[bytes]] = []

    def worker(self, *args: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, "CONVEYOR_URL": self.db_url, "CONVEYOR_TEST_LEDGER": str(self.ledger),
               "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
        cmd = [sys.executable, "-m", "conveyor", "worker", "tests.apps.acceptance:app",
               "--heartbeat-interval", "0.3", "--log-level", "warning", *args]
        log = open(self.ledger.with_name(f"worker-{len(self.procs)}.log"), "wb")  # noqa: SIM115
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.procs.append(proc)
        return proc

    def output(self, proc: subprocess.Popen[bytes]) -> str:
        index = self.procs.index(proc)
        return self.ledger.with_name(f"worker-{index}.log").read_text(errors="replace")

    def events(self) -> list[tuple[str, int, int, int]]:
        if not self.ledger.exists():
            return []
        out = []
        for line in self.ledger.read_text().splitlines():
            event, job, attempt, pid = line.split()
            out.append((event, int(job), int(attempt), int(pid)))
        return out

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def cluster(db_url: str, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(db_url, tmp_path / "ledger.txt")
    try:
        yield c
    finally:
        c.stop_all()


@pytest.fixture
def queue_app(db_url: str) -> Iterator[Conveyor]:
    app = Conveyor(db_url)  # enqueues the acceptance app's tasks into this test's database
    try:
        yield app
    finally:
        app.close()


def wait_until(check: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def counts(app: Conveyor) -> dict[str, int]:
    return app.count_jobs()


def test_kill_9_mid_job_loses_nothing(queue_app: Conveyor, cluster: Cluster) -> None:
    queue_app.enqueue_many([acceptance.sleepy.job(0.3) for _ in range(40)])
    victim = cluster.worker("-c", "5", "--lease-ttl", "1.5")
    wait_until(lambda: len(cluster.events()) >= 5, 20, "the first worker to start jobs")
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    cluster.worker("-c", "10", "--lease-ttl", "1.5")
    wait_until(lambda: counts(queue_app)["completed"] == 40, 40, "every job completed")
    starts = collections.Counter(j for e, j, _, _ in cluster.events() if e == "start")
    assert set(starts) == {j.id for j in queue_app.list_jobs(limit=100)}
    rescued = [j for j in queue_app.list_jobs(limit=100) if j.attempt > 1]
    assert rescued, "the killed worker's jobs were run again by the second one"
    assert all("lease expired" in j.errors[0]["error"] for j in rescued)


def test_sigterm_drains_running_jobs_then_exits_zero(queue_app: Conveyor, cluster: Cluster) -> None:
    jobs = queue_app.enqueue_many([acceptance.sleepy.job(0.8) for _ in range(6)])
    proc = cluster.worker("-c", "2", "--shutdown-timeout", "20")
    wait_until(lambda: len(cluster.events()) >= 2, 20, "two jobs to start")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    done = [queue_app.get_job(j.id) for j in jobs]
    finished = [j for j in done if j is not None and j.state == JobState.COMPLETED]
    waiting = [j for j in done if j is not None and j.state == JobState.AVAILABLE]
    assert len(finished) >= 2 and len(finished) + len(waiting) == 6
    assert all(j.attempt == 0 for j in waiting)


def test_sigterm_past_the_timeout_returns_jobs_without_an_attempt(
    queue_app: Conveyor, cluster: Cluster
) -> None:
    jobs = queue_app.enqueue_many([acceptance.sleepy.job(60), acceptance.sleepy_sync.job(1.5)])
    proc = cluster.worker("-c", "5", "--shutdown-timeout", "0.3")
    wait_until(lambda: len(cluster.events()) >= 2, 20, "both jobs to start")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    for job in jobs:
        final = queue_app.get_job(job.id)
        assert final is not None and final.state == JobState.AVAILABLE, final
        assert final.attempt == 0 and final.lease_token is None


def test_second_sigint_exits_at_once(queue_app: Conveyor, cluster: Cluster) -> None:
    queue_app.enqueue_many([acceptance.sleepy.job(60)])
    # info level: the worker logs when the first signal has made it drain
    proc = cluster.worker("-c", "1", "--shutdown-timeout", "60", "--log-level", "info")
    wait_until(lambda: len(cluster.events()) >= 1, 20, "the job to start")
    proc.send_signal(signal.SIGINT)
    wait_until(lambda: "stopping: no new jobs" in cluster.output(proc) or proc.poll() is not None,
               20, "the worker to log that it is draining")
    assert proc.poll() is None, "first SIGINT only starts draining"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=5) == 130


def test_two_workers_race_over_2000_jobs_each_run_once(
    queue_app: Conveyor, cluster: Cluster
) -> None:
    workers = [cluster.worker("-c", "20") for _ in range(2)]
    # Both must be up before the jobs arrive, or the first could take them all.
    wait_until(lambda: len([n for n in queue_app.list_nodes() if n.alive]) == 2, 30,
               "both workers to register")
    # 10 ms a job: one worker alone needs a second for them all, five of the other's
    # 0.2 s polls on SQLite, so the race is real on a fast machine too (with instant
    # jobs, one worker could drain everything between two polls of the other).
    for start in range(0, 2000, 500):
        queue_app.enqueue_many([acceptance.sleepy.job(0.01) for _ in range(start, start + 500)])
    wait_until(lambda: counts(queue_app)["completed"] == 2000, 120, "every job completed")
    for proc in workers:
        proc.send_signal(signal.SIGTERM)
    for proc in workers:
        assert proc.wait(timeout=30) == 0
    events = cluster.events()
    starts = collections.Counter(j for e, j, _, _ in events if e == "start")
    assert len(starts) == 2000 and set(starts.values()) == {1}
    assert all(a == 1 for _, _, a, _ in events)
    assert len({pid for *_, pid in events}) == 2, "both workers took a share"


def test_stale_workers_late_completion_is_fenced_out(queue_app: Conveyor, cluster: Cluster) -> None:
    (job,) = queue_app.enqueue_many([acceptance.sleepy_sync.job(2.0)])
    stale = cluster.worker("-c", "1", "--lease-ttl", "1")
    wait_until(lambda: len(cluster.events()) >= 1, 20, "the job to start")
    freeze_between_writes(stale, queue_app.url)  # frozen: no heartbeats, lease runs out
    rescuer = cluster.worker("-c", "1", "--lease-ttl", "1")

    def completed_by_rescuer() -> bool:
        current = queue_app.get_job(job.id)
        return current is not None and current.state == JobState.COMPLETED

    wait_until(completed_by_rescuer, 30, "the rescuer to complete the job")
    stale.send_signal(signal.SIGCONT)
    # Woken, the stale worker learns from its heartbeat that the lease is gone and drops
    # the attempt, or its ack arrives first and the fence rejects it: either is logged.
    wait_until(lambda: "lease lost" in cluster.output(stale)
               or "rejected by the fence" in cluster.output(stale), 20, "the stale worker to notice")
    final = queue_app.get_job(job.id)
    assert final is not None and final.state == JobState.COMPLETED
    assert final.attempt == 2 and final.result == rescuer.pid
    stale.send_signal(signal.SIGTERM)
    assert stale.wait(timeout=30) == 0
