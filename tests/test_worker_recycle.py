"""Worker processes that stay healthy, with real `conveyor worker` processes and real
signals on both backends: a child recycled after N jobs (every job run exactly once), a
memory bound, a hard time limit that kills a stuck sync handler with its process, a
child killed with SIGKILL replaced and logged, and bad option values.

Every wait is a condition with a deadline (the machine is loaded)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor, JobState
from conveyor._storage import make_ack

from .apps import recycle_app
from .conftest import WaitFor

ROOT = Path(__file__).resolve().parent.parent
APP = "tests.apps.recycle_app:app"
WORKER_ARGS = ("--heartbeat-interval", "0.3", "--lease-ttl", "3", "--shutdown-timeout", "3",
               "--stage-interval", "0.1")
DEADLINE = 90.0


class Run:
    """One supervised `conveyor worker`, its log and the handlers' ledger."""

    def __init__(self, db_url: str, tmp: Path) -> None:
        self.db_url, self.ledger, self.log = db_url, tmp / "ledger.txt", tmp / "worker.log"
        self.ledger.touch()
        self.proc: subprocess.Popen[bytes] | None = None

    def env(self) -> dict[str, str]:
        return {**os.environ, "CONVEYOR_URL": self.db_url,
                "CONVEYOR_TEST_LEDGER": str(self.ledger),
                "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}

    def start(self, *args: str, env: dict[str, str] | None = None) -> None:
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "conveyor", "worker", APP, *WORKER_ARGS, *args],
                env={**self.env(), **(env or {})}, cwd=ROOT, stdout=out,
                stderr=subprocess.STDOUT)

    def lines(self, event: str) -> list[tuple[int, int]]:
        """(job id, pid) of each ledger line of ``event``."""
        out = []
        for line in self.ledger.read_text().splitlines():
            name, job, pid = line.split()
            if name == event:
                out.append((int(job), int(pid)))
        return out

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def run(db_url: str, tmp_path: Path) -> Iterator[Run]:
    r = Run(db_url, tmp_path)
    try:
        yield r
    finally:
        r.stop()


@pytest.fixture
def tasks(db_url: str) -> Iterator[Conveyor]:
    app = recycle_app.build(db_url)
    try:
        yield app
    finally:
        app.close()


def _all_in(app: Conveyor, ids: list[int], *states: JobState) -> bool:
    return all(j is not None and j.state in states for j in (app.get_job(i) for i in ids))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_child_is_recycled_after_n_jobs_and_every_job_runs_once(
        run: Run, tasks: Conveyor, wait_for: WaitFor) -> None:
    ids = [tasks.tasks["count"].enqueue().id for _ in range(24)]
    run.start("--max-jobs-per-child", "5", "-c", "2")  # one process, under the supervisor
    wait_for(lambda: _all_in(tasks, ids, JobState.COMPLETED), DEADLINE,
             message=f"every job completed\n{run.output()}")
    runs = run.lines("run")
    assert sorted(job for job, _ in runs) == sorted(ids), collections.Counter(j for j, _ in runs)
    assert all(tasks.get_job(i).attempt == 1 for i in ids)  # type: ignore[union-attr]
    assert len({pid for _, pid in runs}) >= 3, run.output()
    assert "recycled itself" in run.output() and "max_jobs_per_child" in run.output()


def test_a_memory_bound_recycles_the_child(run: Run, tasks: Conveyor, wait_for: WaitFor) -> None:
    first = tasks.tasks["hog"].enqueue(mb=120).id
    run.start("--max-memory-per-child", "100MB", "-c", "1")
    wait_for(lambda: "max_memory_per_child" in run.output() and "recycled itself" in run.output(),
             DEADLINE, message=f"a recycle for memory\n{run.output()}")
    second = tasks.tasks["count"].enqueue().id
    wait_for(lambda: _all_in(tasks, [first, second], JobState.COMPLETED), DEADLINE,
             message=run.output())
    (_, hog_pid), = run.lines("hog")
    (_, count_pid), = run.lines("run")
    assert hog_pid != count_pid  # the replacement ran the next job


def test_a_stuck_sync_handler_is_killed_with_its_process(
        run: Run, tasks: Conveyor, wait_for: WaitFor) -> None:
    stuck = tasks.tasks["stuck"].enqueue().id
    run.start("--hard-timeout-grace", "1", "-c", "4", "--shutdown-timeout", "30")
    wait_for(lambda: run.lines("stuck"), DEADLINE, message=run.output())
    others = [tasks.tasks["slow"].enqueue(seconds=4.0).id for _ in range(2)]
    # both attempts time out (max_attempts=2): each stuck thread ends with its process
    wait_for(lambda: _all_in(tasks, [stuck], JobState.DISCARDED), DEADLINE,
             message=f"the stuck job discarded after 2 timed-out attempts\n{run.output()}")
    job = tasks.get_job(stuck)
    assert job is not None and len(job.errors) == 2, job
    assert all("ran past its timeout" in e["error"] for e in job.errors), job.errors
    # 2 or 3 starts, in 1 or 2 processes: the retry may be claimed by the same child
    # before its hard limit fired (then it fails there too, or is given back with the
    # rest, no attempt used, and runs again in the replacement)
    pids = [pid for _, pid in run.lines("stuck")]
    assert len(pids) >= 2, pids
    wait_for(lambda: not any(_alive(p) for p in pids), DEADLINE, message="stuck processes gone")
    assert "hard time limit" in run.output()
    wait_for(lambda: _all_in(tasks, others, JobState.COMPLETED), DEADLINE, message=run.output())
    for i in others:  # given back by the killed child without using an attempt
        assert tasks.get_job(i).attempt == 1  # type: ignore[union-attr]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV])
def test_a_dead_child_is_replaced_and_logged(
        run: Run, tasks: Conveyor, wait_for: WaitFor, sig: signal.Signals) -> None:
    run.start("--processes", "2")
    nodes = wait_for(lambda: len(tasks.list_nodes()) == 2 and tasks.list_nodes(), DEADLINE,
                     message=run.output())
    assert nodes
    victim = nodes[0].pid
    os.kill(victim, sig)
    wait_for(lambda: f"pid {victim}) died: killed by {sig.name}" in run.output(), DEADLINE,
             message=run.output())
    def replaced() -> bool:
        return any(n.labels.get("conveyor.last-death") == sig.name
                   and n.labels.get("conveyor.restarts") == "1" for n in tasks.list_nodes())
    wait_for(replaced, DEADLINE, message=run.output())
    job = tasks.tasks["count"].enqueue().id
    wait_for(lambda: _all_in(tasks, [job], JobState.COMPLETED), DEADLINE, message=run.output())
    status = subprocess.run([sys.executable, "-m", "conveyor", "status", "--app", APP, "--json"],
                            env=run.env(), cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stderr
    labels = [n["labels"] for n in json.loads(status.stdout)["workers"]]
    assert {"conveyor.restarts": "1", "conveyor.last-death": sig.name} in labels, labels


@pytest.mark.parametrize("args", [
    ("--max-jobs-per-child", "0"), ("--max-jobs-per-child", "x"),
    ("--max-memory-per-child", "512"), ("--max-memory-per-child", "12XB"),
    ("--max-memory-per-child", "0MB"), ("--hard-timeout-grace", "0"),
    ("--hard-timeout-grace", "-1"),
])
def test_bad_option_values_exit_2(run: Run, args: tuple[str, ...]) -> None:
    done = subprocess.run([sys.executable, "-m", "conveyor", "worker", APP, *args],
                          env=run.env(), cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert args[0] in done.stderr


def test_size_parsing() -> None:
    from conveyor.cli.worker import Size

    size = Size()
    assert size.convert("512MB", None, None) == 512 * 1024**2
    assert size.convert("1.5gb", None, None) == int(1.5 * 1024**3)
    assert size.convert("300000 KB", None, None) == 300000 * 1024


def test_the_recycler_asks_once_for_memory_and_at_once_for_a_stuck_thread() -> None:
    """run_once() directly: a memory bound below this process's memory recycles with a
    drain; a thread past its hard deadline recycles at once; a thread that ended does
    not."""
    from conveyor._runtime.recycler import Overdue, Recycler, resident_bytes

    async def main() -> None:
        asked: list[tuple[str, bool]] = []
        overdue: list[Overdue] = []
        recycler = Recycler(overdue, lambda reason, now: asked.append((reason, now)),
                            max_memory=resident_bytes() // 2)
        assert (await recycler.run_once() or "").startswith("max_memory_per_child")
        await recycler.run_once()
        assert [now for _, now in asked] == [False]  # asked once
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[object] = loop.create_future()
        ended.set_result(None)
        stuck: asyncio.Future[object] = loop.create_future()
        overdue += [Overdue(1, ended, loop.time() - 1), Overdue(2, stuck, loop.time() - 1)]
        assert "job(s) 2 " in (await recycler.run_once() or "")
        assert asked[-1][1] is True and [o.job_id for o in overdue] == [2]
        stuck.cancel()

    asyncio.run(main())


def test_children_that_cannot_start_stop_the_supervisor(run: Run) -> None:
    """No restart loop for a child that exits 3 (database unreachable) on its first
    start: the supervisor stops and exits 3, as before recycling existed."""
    done = subprocess.run([sys.executable, "-m", "conveyor", "worker", APP, "--processes", "2",
                           "--url", "postgresql://postgres@127.0.0.1:1/none"],
                          env=run.env(), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "could not start" in done.stderr and "restart #" not in done.stderr


#: The supervisor kills a wedged child this long past its hard deadline (5 s by default).
SHORT_MARGIN = {"CONVEYOR_WATCHDOG_MARGIN": "0.5"}
#: Leases far longer than the test: a job that comes back did so through the handoff,
#: not through the lease-expiry rescue.
LONG_LEASE = ("--lease-ttl", "120")


def test_a_child_too_wedged_to_recycle_itself_is_killed_by_the_supervisor(
        run: Run, tasks: Conveyor, wait_for: WaitFor) -> None:
    """A handler in C code holding the GIL stops the child's loop: the supervisor, told
    the job's hard deadline through its pipe, kills the child and starts another, which
    fails the attempt with TaskTimedOut (max_attempts=1: discarded)."""
    job = tasks.tasks["wedged"].enqueue().id
    run.start("--hard-timeout-grace", "1", "-c", "2", *LONG_LEASE, env=SHORT_MARGIN)
    (_, pid), = wait_for(lambda: run.lines("wedged"), DEADLINE, message=run.output())
    wait_for(lambda: f"(pid {pid}) did not recycle itself with job(s) {job}" in run.output(),
             DEADLINE, message=run.output())
    wait_for(lambda: f"(pid {pid}) killed at a hard time limit" in run.output(), DEADLINE,
             message=run.output())
    assert not _alive(pid)
    wait_for(lambda: _all_in(tasks, [job], JobState.DISCARDED), DEADLINE, message=run.output())
    (error,) = tasks.get_job(job).errors  # type: ignore[union-attr]
    assert error["error"] == "TimeoutError: task ran past its timeout of 1.0s", error
    assert error["pid"] == pid and error["attempt"] == 1, error
    after = tasks.tasks["count"].enqueue().id  # the replacement serves the queue
    wait_for(lambda: _all_in(tasks, [after], JobState.COMPLETED), DEADLINE, message=run.output())


def _runs(run: Run, event: str, job: int) -> list[int]:
    return [pid for j, pid in run.lines(event) if j == job]


@pytest.mark.parametrize("chunked", [False, True], ids=["job", "chunk"])
def test_a_wedged_childs_jobs_are_settled_by_its_replacement(
        run: Run, tasks: Conveyor, wait_for: WaitFor, chunked: bool) -> None:
    """A sync handler (or a chunk's) holds the GIL past timeout + grace while a sync and
    an async job of the same child run: the child is killed and replaced; the stuck
    attempt fails with TaskTimedOut and is retried by its policy (it succeeds on attempt
    2); the other two are given back at once, their attempt not used, and finish in the
    replacement; no job runs twice at once."""
    sleeper = tasks.tasks["sleeper"].enqueue(first=60.0, again=0.1).id
    napper = tasks.tasks["napper"].enqueue(first=60.0, again=0.1).id
    run.start("--hard-timeout-grace", "0.5", "-c", "4", *LONG_LEASE, env=SHORT_MARGIN)
    wait_for(lambda: _runs(run, "sleeper", sleeper) and _runs(run, "napper", napper),
             DEADLINE, message=run.output())
    if chunked:
        event, message = "gil-chunk", "chunk ran past its task's timeout of 1.0s"
        chunk = tasks.tasks["gil_chunk"]  # both at once: claimed into one chunk
        stuck = [j.id for j in tasks.enqueue_many([chunk.job(), chunk.job()])]
    else:
        event, message = "gil", "task ran past its timeout of 1.0s"
        stuck = [tasks.tasks["gil"].enqueue().id]
    wait_for(lambda: all(_runs(run, event, j) for j in stuck), DEADLINE, message=run.output())
    (pid,) = {_runs(run, event, j)[0] for j in stuck}  # one child ran them all
    assert _runs(run, "sleeper", sleeper) == [pid]
    wait_for(lambda: _all_in(tasks, [*stuck, sleeper, napper], JobState.COMPLETED), DEADLINE,
             message=run.output())
    assert not _alive(pid)
    for j in stuck:  # attempt 1 failed with TaskTimedOut, recorded for the killed child
        job = tasks.get_job(j)
        assert job is not None and job.attempt == 2, job
        (error,) = job.errors
        assert error["error"] == f"TimeoutError: {message}", error
        assert error["attempt"] == 1 and error["pid"] == pid, error
        first, again = _runs(run, event, j)
        assert first == pid != again
    for j, name in ((sleeper, "sleeper"), (napper, "napper")):  # given back, attempt unused
        job = tasks.get_job(j)
        assert job is not None and job.attempt == 1 and job.errors == [], job
        first, again = _runs(run, name, j)
        assert first == pid != again and _runs(run, f"{name}-done", j) == [again]
    assert not [line for line in run.ledger.read_text().splitlines()
                if line.startswith("overlap")], run.ledger.read_text()
    out = run.output()
    assert f"(pid {pid}) killed at a hard time limit" in out, out
    assert (f"its replacement will fail {len(stuck)} job(s) of pid {pid} past their timeout "
            "with TaskTimedOut and give 2 other(s) back") in out, out
    assert "lease expired" not in out


def test_the_supervisor_reads_leases_and_deadlines_into_a_handoff() -> None:
    """The pipe's protocol, in process: claimed, settled, watched and unwatched jobs; at
    the kill, those past their soft deadline are timed out, the rest given back."""
    import time

    from conveyor._runtime.handoff import Handoff
    from conveyor._runtime.hardlimit import Watchdog
    from conveyor.cli._supervisor import Child, Supervisor

    read, write = os.pipe()
    os.set_blocking(read, False)
    child, dog = Child(0, watch_fd=read), Watchdog(write)
    try:
        dog.say("Nnode-1\n")
        for job in range(1, 6):
            dog.say(f"={job} {job * 1000 - 3}\n")
        dog.settled([2])
        dog.watch([1], -2.0, 1.0)  # soft deadline 2 s ago, hard 1 s ago
        dog.watch([3], 30.0, 1.0)  # a sync handler still within its timeout
        dog.watch([4], -2.0, 1.0)
        dog.unwatch([4], None)  # its thread ended: no longer timed out
        dog.say("=6 ")  # a partial line waits for its end
        Supervisor._read(Supervisor([], 1, watchdog=True), child)
        assert child.node == "node-1" and child.pending == b"=6 "
        assert set(child.leases) == {"1", "3", "4", "5"} and set(child.deadlines) == {"1", "3"}
        h = Handoff.loads(Supervisor._handoff(child, 42, time.time()))
        assert (h.pid, h.node) == (42, "node-1")
        assert [(i, t) for i, t, _ in h.timed_out] == [(1, 997)]
        assert sorted((i, t) for i, t, _ in h.given_back) == [(3, 2997), (4, 3997), (5, 4997)]
        assert not child.leases and not child.deadlines
    finally:
        os.close(read)
        os.close(write)


def test_a_handoff_is_settled_fenced_on_each_lease_token(tasks: Conveyor) -> None:
    """settle() on real storage: the timed-out job fails with TaskTimedOut as the soft
    timeout records it (its runner the killed process), a running job is given back with
    its attempt returned, one leased under another token or already finished is left
    alone, and the same outcomes written twice apply once."""
    import time

    from conveyor._runtime.executor import Execution, Executor
    from conveyor._runtime.handoff import Handoff, settle
    from conveyor._storage import JobAckManyParams, JobFetchAvailableParams

    ids = [tasks.tasks["gil"].enqueue().id, *(tasks.tasks["count"].enqueue().id for _ in range(3))]

    async def main() -> None:
        storage = await tasks.storage()
        claimed = {j.id: j.lease_token or 0 for j in await storage.job_fetch_available(
            JobFetchAvailableParams("default", 10, "dead-node", 60.0))}
        assert sorted(claimed) == ids
        gil, given, other, done = ids
        await storage.job_ack_many(JobAckManyParams([make_ack(
            id=done, lease_token=claimed[done], state=JobState.COMPLETED, run_time=0.1)]))
        now = time.time()
        handoff = Handoff(4242, "dead-node", now, [(gil, claimed[gil], now - 3)],
                          [(given, claimed[given], now - 3), (other, claimed[other] + 1, now - 3),
                           (done, claimed[done], now - 3)])
        executor = Executor(tasks.registry, 1, "new-node")
        executions: dict[int, Execution] = {}
        try:
            acks = await settle(handoff, storage, executor, executions)
        finally:
            executor.shutdown()
        assert [a.id for a in acks] == [gil, given] and sorted(executions) == [gil, given]
        failed, back = acks
        assert failed.state is JobState.RETRYABLE and 0 < (failed.delay or 0) < 1
        error = json.loads(failed.error_json or "{}")
        assert error["error"] == "TimeoutError: task ran past its timeout of 1.0s", error
        assert (error["pid"], error["node"], error["attempt"]) == (4242, "dead-node", 1)
        assert error["run_time"] >= 2.9 and (executions[gil].run_time or 0) >= 2.9
        assert back.state is JobState.AVAILABLE and back.attempt_delta == -1
        assert sorted(await storage.job_ack_many(JobAckManyParams(acks))) == [gil, given]
        assert await storage.job_ack_many(JobAckManyParams(acks)) == []  # fenced: once

    async def run() -> None:
        try:
            await main()
        finally:
            await tasks.close_async()

    asyncio.run(run())
    gil, given, other, done = (tasks.get_job(i) for i in ids)
    assert gil is not None and gil.state is JobState.RETRYABLE and gil.attempt == 1
    assert given is not None and given.state is JobState.AVAILABLE and given.attempt == 0
    assert other is not None and other.state is JobState.RUNNING and other.errors == []
    assert done is not None and done.state is JobState.COMPLETED


@pytest.mark.parametrize("watchdog", [False, True], ids=["plain", "watchdog"])
def test_children_stop_when_the_supervisor_is_killed(
        run: Run, tasks: Conveyor, wait_for: WaitFor, watchdog: bool) -> None:
    """SIGKILL to the supervisor (no chance to forward anything): its children drain and
    exit on their own (PR_SET_PDEATHSIG) instead of running on unsupervised, and their
    nodes leave the cluster."""
    if not sys.platform.startswith("linux"):
        pytest.skip("parent-death signals are a Linux feature")
    run.start("--processes", "2", *(("--hard-timeout-grace", "5") if watchdog else ()))
    nodes = wait_for(lambda: len(tasks.list_nodes()) == 2 and tasks.list_nodes(), DEADLINE,
                     message=run.output())
    assert nodes and run.proc is not None
    children = [n.pid for n in nodes]
    assert all(_alive(pid) for pid in children)
    run.proc.kill()
    run.proc.wait(30)
    try:
        wait_for(lambda: not any(_alive(pid) for pid in children), DEADLINE,
                 message=f"children {children} outlived their supervisor\n{run.output()}")
    finally:  # by pid: no orphan left to the next test, whatever happened
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not tasks.list_nodes(), DEADLINE, message=run.output())
    job = tasks.tasks["count"].enqueue().id
    assert tasks.get_job(job).state == JobState.AVAILABLE  # type: ignore[union-attr]
