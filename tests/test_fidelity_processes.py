"""Issue 14 across real ``conveyor worker`` processes, on both backends: a rolling deploy
(old and new workers with different task sets), shutdown reaching handlers on a real
SIGTERM, and a queue cool-down raised on one node that holds the other.

The workers load tests/apps/fidelity.py. Every wait is a condition with a deadline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, Job, JobState
from conveyor.web import create_app

from .apps import fidelity
from .conftest import WaitFor

ROOT = Path(__file__).resolve().parent.parent
APP = "tests.apps.fidelity"
#: Frequent heartbeats so a started worker is listed at once; INFO logs for the evidence.
WORKER_ARGS = ("--heartbeat-interval", "0.3", "--lease-ttl", "5", "--log-level", "info",
               "--stage-interval", "0.1")


class Procs:
    """`conveyor worker` processes on one database, each cleaned up by its own pid."""

    def __init__(self, db_url: str, tmp: Path) -> None:
        self.db_url, self.tmp = db_url, tmp
        self.ledger = tmp / "ledger.txt"
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, attr: str, *args: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, "CONVEYOR_URL": self.db_url, "CONVEYOR_TEST_LEDGER": str(self.ledger),
               "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
        cmd = [sys.executable, "-m", "conveyor", "worker", f"{APP}:{attr}", *WORKER_ARGS, *args]
        with open(self.log(len(self.procs)), "wb") as out:
            proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def log(self, index: int) -> Path:
        return self.tmp / f"worker-{index}.log"

    def output(self) -> str:
        return "\n".join(f"--- worker {i} (pid {p.pid}, exit {p.poll()}) ---\n"
                         + self.log(i).read_text(errors="replace")
                         for i, p in enumerate(self.procs))

    def entries(self, event: str, task: str | None = None) -> list[list[str]]:
        if not self.ledger.exists():
            return []
        rows = [line.split() for line in self.ledger.read_text().splitlines()]
        return [r for r in rows if r[0] == event and (task is None or r[1] == task)]

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


@pytest.fixture
def procs(db_url: str, tmp_path: Path) -> Iterator[Procs]:
    p = Procs(db_url, tmp_path)
    try:
        yield p
    finally:
        p.stop_all()


@pytest.fixture
def new_app(db_url: str) -> Iterator[Conveyor]:
    """The test's own app on the workers' database, knowing every task (the new code)."""
    app = fidelity.build(db_url, new=True)
    try:
        yield app
    finally:
        app.close()


def live(app: Conveyor, procs: Procs, *started: subprocess.Popen[bytes],
         wait_for: WaitFor) -> dict[int, str]:
    """Wait until every given process is a live node; returns {pid: node id}."""
    def registered() -> dict[int, str]:
        dead = [p for p in started if p.poll() is not None]
        assert not dead, f"a worker exited early:\n{procs.output()}"
        nodes = {n.pid: n.id for n in app.list_nodes() if n.alive}
        return nodes if all(p.pid in nodes for p in started) else {}

    return wait_for(registered, timeout=30, interval=0.05, message="the workers to register")


def completed(app: Conveyor, job: Job) -> Callable[[], bool]:
    def check() -> bool:
        j = app.get_job(job.id)
        return j is not None and j.state == JobState.COMPLETED
    return check


# -- 1. rolling deploy ---------------------------------------------------------------------------


def test_a_rolling_deploy_old_workers_give_new_tasks_back_and_new_workers_run_them(
        new_app: Conveyor, procs: Procs, wait_for: WaitFor) -> None:
    """An old worker (no ``fid_new``) meets the job and gives it back without using an
    attempt; explain_job and the dashboard say no live worker knows the task; a new
    worker started later runs it with its first attempt, while the old one still runs."""
    old = procs.start("old_app", "-q", "deploy:2")
    live(new_app, procs, old, wait_for=wait_for)
    job = new_app.registry.tasks["fid_new"].enqueue(21)

    def met() -> Job | None:
        j = new_app.get_job(job.id)
        return j if j is not None and j.errors and j.state != JobState.RUNNING else None

    waiting = wait_for(met, timeout=20, message="the old worker to give the job back")
    assert waiting is not None
    assert waiting.attempt == 0 and waiting.state in (JobState.SCHEDULED, JobState.AVAILABLE)
    assert waiting.errors[0]["unknown_task"] == "fid_new" and waiting.errors[0]["pid"] == old.pid

    def explained() -> list[str]:
        reasons = new_app.explain_job(job.id).reasons
        return reasons if any("no live worker knows task 'fid_new'" in r for r in reasons) else []

    reasons = wait_for(explained, timeout=10, message="explain_job to name the unknown task")
    assert any("is discarded at" in r for r in reasons), reasons
    page = _job_page(new_app, job.id)
    assert "Why it waits" in page and "no live worker knows task &#39;fid_new&#39;" in page, page

    new = procs.start("new_app", "-q", "deploy:2")
    nodes = live(new_app, procs, old, new, wait_for=wait_for)
    done = wait_for(lambda: (j := new_app.get_job(job.id)) is not None
                    and j.state == JobState.COMPLETED and j, timeout=30,
                    message=f"the new worker to run the job\n{procs.output()}")
    assert isinstance(done, Job)
    assert done.result == {"double": 42, "pid": new.pid} and done.ran_on == nodes[new.pid]
    assert done.attempt == 1, "the waits on the old worker used attempts"
    assert old.poll() is None, "the old worker died"
    print(f"\nrolling deploy: job {job.id} given back {len(done.errors)} time(s) recorded, run "
          f"by the new worker (pid {new.pid}) with attempt {done.attempt}")


def test_a_task_no_worker_learns_ends_discarded_after_the_bound(
        new_app: Conveyor, procs: Procs, wait_for: WaitFor) -> None:
    """Two old workers only, with a 3 s ``--unknown-task-timeout``: the job goes back and
    forth between them without using an attempt, then ends discarded with a clear error."""
    olds = [procs.start("old_app", "-q", "deploy:2", "--unknown-task-timeout", "3")
            for _ in range(2)]
    live(new_app, procs, *olds, wait_for=wait_for)
    job = new_app.registry.tasks["fid_new"].enqueue(1)
    final = wait_for(lambda: (j := new_app.get_job(job.id)) is not None
                     and j.state.is_final and j, timeout=30,
                     message=f"the job to end\n{procs.output()}")
    assert isinstance(final, Job)
    assert final.state == JobState.DISCARDED, final
    assert final.attempt == 1
    first = final.errors[0]
    assert first["unknown_task"] == "fid_new"
    error = final.errors[-1]["error"]
    assert "unknown task 'fid_new'" in error and "within 3s (unknown_task_timeout)" in error
    waited = (final.finished_at - final.created_at).total_seconds() if final.finished_at else 0
    assert 2.5 <= waited < 20, f"discarded after {waited:.2f}s"
    print(f"\nno worker learns the task: discarded {waited:.2f}s after enqueue: {error}")


def _job_page(app: Conveyor, job_id: int) -> str:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient
    with TestClient(create_app(app), base_url="http://localhost") as client:
        response = client.get(f"/jobs/{job_id}")
        assert response.status_code == 200
        return str(response.text)


# -- 2. shutdown reaches the handlers ----------------------------------------------------------


def test_sigterm_reaches_running_handlers_at_once_and_they_give_themselves_back(
        new_app: Conveyor, procs: Procs, wait_for: WaitFor, tmp_path: Path) -> None:
    """A worker with a 60 s shutdown timeout runs an async and a sync handler that wait
    for the shutdown; a real SIGTERM: both see it within a bounded time (far below the
    timeout), snooze, the process exits, and a later worker finishes both jobs."""
    first = procs.start("new_app", "-q", "long:4", "--shutdown-timeout", "60")
    live(new_app, procs, first, wait_for=wait_for)
    jobs = [new_app.registry.tasks[name].enqueue(str(tmp_path / f"marker-{name}"))
            for name in ("fid_long", "fid_long_sync")]
    wait_for(lambda: len(procs.entries("started")) == 2, timeout=20,
             message=f"both handlers to start\n{procs.output()}")
    sent = time.time()
    first.send_signal(signal.SIGTERM)
    wait_for(lambda: len(procs.entries("shutdown-seen")) == 2, timeout=10,
             message=f"the handlers to see the shutdown\n{procs.output()}")
    seen = [float(e[4]) - sent for e in procs.entries("shutdown-seen")]
    first.wait(timeout=20)
    exited = time.time() - sent
    assert first.returncode == 0, procs.output()
    assert max(seen) < 3.0, f"handlers saw the shutdown {seen}s after SIGTERM"
    assert exited < 20, f"the worker took {exited:.1f}s: it waited for shutdown_timeout"
    assert not procs.entries("no-shutdown")
    for job in jobs:
        back = new_app.get_job(job.id)
        assert back is not None and back.state == JobState.AVAILABLE and back.attempt == 0, back

    later = procs.start("new_app", "-q", "long:4")
    for job in jobs:
        wait_for(completed(new_app, job), timeout=30,
                 message=f"the later worker to finish job {job.id}\n{procs.output()}")
        assert new_app.get_job(job.id).result == later.pid  # type: ignore[union-attr]
    print(f"\nshutdown: handlers saw SIGTERM after {[round(s, 3) for s in seen]}s; the worker "
          f"exited after {exited:.2f}s (shutdown timeout 60s)")


# -- 3. Throttle across the cluster --------------------------------------------------------------


def _cooldowns(app: Conveyor) -> list[Any]:
    async def read() -> list[Any]:
        return await (await app.storage()).queue_cooldown_list()

    return app._sync(read())


def test_a_queue_throttle_on_one_node_stops_every_node_claiming_until_it_ends(
        new_app: Conveyor, procs: Procs, wait_for: WaitFor, tmp_path: Path) -> None:
    """Two workers serve queue ``api``. A handler raises Throttle(retry_after=8,
    scope="queue") on one of them; once both have read the stored cool-down, ten jobs are
    enqueued: none starts (on either node) before the cool-down ends, then all run."""
    workers = [procs.start("new_app", "-q", "api:2", "--settings-interval", "0.2")
               for _ in range(2)]
    nodes = live(new_app, procs, *workers, wait_for=wait_for)
    marker = tmp_path / "throttle-once"
    marker.touch()
    hit = new_app.registry.tasks["fid_hit"]
    throttled = hit.enqueue(str(marker))
    rows = wait_for(lambda: [r for r in _cooldowns(new_app) if r.queue == "api"], timeout=20,
                    message=f"the cool-down to be stored\n{procs.output()}")
    until = rows[0].cool_until
    raiser = int(procs.entries("start", "fid_hit")[0][5])
    applied = "queue 'api' cools down for"
    wait_for(lambda: all(applied in procs.log(i).read_text() for i in range(2)), timeout=10,
             message=f"both nodes to apply the cool-down\n{procs.output()}")
    assert time.time() < until.timestamp() - 1, "the test was too slow for the cool-down"
    jobs = new_app.enqueue_many([hit.job(str(tmp_path / "absent")) for _ in range(10)])
    for job in [*jobs, throttled]:
        wait_for(completed(new_app, job), timeout=30,
                 message=f"job {job.id} to run after the cool-down\n{procs.output()}")
    started = {}
    for job in jobs:
        done = new_app.get_job(job.id)
        assert done is not None and done.attempted_at is not None
        started[job.id] = (done.attempted_at - until).total_seconds(), done.ran_on
    early = {k: v for k, v in started.items() if v[0] < -0.05}
    assert not early, f"started before the cool-down ended (s after its end, node): {early}"
    other = next(node for pid, node in nodes.items() if pid != raiser)
    print(f"\ncluster throttle: raised on pid {raiser}; 10 jobs started "
          f"{min(v[0] for v in started.values()):.2f}..{max(v[0] for v in started.values()):.2f}s "
          f"after the cool-down ended; {sum(v[1] == other for v in started.values())} of them "
          "on the other node")
