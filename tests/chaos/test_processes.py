"""Scenarios 1-4: worker processes killed, signalled, crashing and frozen (both backends)."""

from __future__ import annotations

import signal
import time
from functools import partial
from pathlib import Path

import pytest

from conveyor import Conveyor, Job, JobState

from .._signals import freeze_between_writes
from . import app as chaos
from .harness import (
    Cluster,
    Observer,
    Result,
    all_final,
    check,
    enqueue,
    jobs,
    pick,
    record,
    rng,
    state_counts,
)


def backend_of(url: str) -> str:
    return "sqlite" if url.startswith("sqlite") else "postgres"


def completed(job: Job) -> str | None:
    return None if job.state == JobState.COMPLETED else f"expected completed, is {job.state.value}"


def cancel(url: str, job_id: int) -> None:
    app = Conveyor(url)
    try:
        app.cancel_job(job_id)
    finally:
        app.close()


def finish(result: Result, started: float) -> None:
    """Record the row for the report, then fail on any violated invariant."""
    result.seconds = time.monotonic() - started
    record(result)
    assert result.outcome is not None
    result.outcome.assert_ok()


# -- 1 --------------------------------------------------------------------------------------


def test_kill_9_under_load(db_url: str, chaos_dir: Path, started: float,
                           request: pytest.FixtureRequest) -> None:
    """Scenario 1: SIGKILL a random worker at random moments, again and again, while
    thousands of mixed jobs (async, sync, failing once) run; start a fresh one each time."""
    n, kills, workers, slots = pick(600, 10_000), pick(5, 30), 3, pick(10, 20)
    r = rng(request.node.nodeid)
    specs = []
    for _ in range(n):
        roll = r.random()
        if roll < 0.1:
            specs.append(chaos.flaky.job(1))
        elif roll < 0.3:
            specs.append(chaos.work_sync.job(r.uniform(0.02, 0.2)))
        else:
            specs.append(chaos.work.job(r.uniform(0.02, 0.2)))
    ids = enqueue(db_url, specs)
    with Cluster(db_url, chaos_dir) as cluster, Observer(db_url) as observer:
        for _ in range(workers):
            cluster.start("-c", str(slots))
        cluster.wait(lambda: len(cluster.events()) >= 20, 30, "workers to start jobs")
        for _ in range(kills):
            time.sleep(r.uniform(0.2, 0.8))  # a random moment: the fault, not a wait
            if all_final(db_url):
                break
            cluster.kill(r.choice(cluster.alive()))
            cluster.start("-c", str(slots))
        cluster.wait(lambda: all_final(db_url), pick(60, 600), "every job to finish")
    outcome = check(db_url, cluster.events(), ids, observer, completed)
    assert outcome.leases_lost > 0, "the kills should have cost some leases"
    finish(Result(1, "kill -9 of workers mid-job under load", backend_of(db_url), n,
                  f"{cluster.kills} x SIGKILL at random moments, {workers} workers x {slots} slots",
                  request.node.nodeid, outcome), started)


# -- 2 --------------------------------------------------------------------------------------


def test_sigterm_past_shutdown_timeout_gives_jobs_back(
    db_url: str, chaos_dir: Path, started: float, request: pytest.FixtureRequest
) -> None:
    """Scenario 2: SIGTERM while long jobs run past --shutdown-timeout: the worker exits
    promptly (even with a sync handler that ignores the stop), the jobs go back to the
    queue without using an attempt; a second signal exits at once."""
    reps = pick(1, 3)
    total = 0
    ids: list[int] = []
    with Cluster(db_url, chaos_dir) as cluster, Observer(db_url) as observer:
        for _ in range(reps):
            batch = enqueue(db_url, [chaos.work.job(0.01) for _ in range(3)]
                            + [chaos.work_sync.job(0.01) for _ in range(3)]
                            + [chaos.stubborn.job(0.01)])
            ids += batch
            total += len(batch)
            base = len([e for e in cluster.events() if e.kind == "start"])
            proc = cluster.start("-c", "10", "--shutdown-timeout", "0.5",
                                 env={"CONVEYOR_CHAOS_HOLD": "60"})
            def all_held(b: int = base + len(batch)) -> bool:
                return len([e for e in cluster.events() if e.kind == "start"]) >= b

            cluster.wait(all_held, 30, "every held job to start")
            signalled = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=15) == 0, cluster.output(proc)
            took = time.monotonic() - signalled
            assert took < 5, f"the worker took {took:.1f}s to exit after its shutdown timeout"
            rows = jobs(db_url)
            for job_id in batch:
                job = rows[job_id]
                assert job.state == JobState.AVAILABLE and job.attempt == 0, job
                assert job.lease_token is None and job.errors == []

        # A second signal exits at once, whatever the shutdown timeout.
        for first, second, code in ((signal.SIGTERM, signal.SIGTERM, 143),
                                    (signal.SIGTERM, signal.SIGINT, 130)):
            proc = cluster.start("-c", "10", "--shutdown-timeout", "60",
                                 env={"CONVEYOR_CHAOS_HOLD": "60"})
            cluster.wait(partial(cluster.ran_any, proc.pid), 30, "the worker to start jobs")
            proc.send_signal(first)
            cluster.wait(partial(cluster.logged, proc, "stopping: no new jobs"), 10,
                         "the first signal to start the drain")
            t0 = time.monotonic()
            proc.send_signal(second)
            assert proc.wait(timeout=10) == code
            assert time.monotonic() - t0 < 3
        # The hard-stopped workers' jobs come back when their lease expires.
        cluster.start("-c", "10")
        cluster.wait(lambda: all_final(db_url), 60, "every job to finish")
    outcome = check(db_url, cluster.events(), ids, observer, completed)
    assert outcome.given_back >= total
    finish(Result(2, "SIGTERM past the shutdown timeout; second signal exits at once",
                  backend_of(db_url), total,
                  f"{reps + 2} x SIGTERM with 60 s jobs and --shutdown-timeout 0.5 "
                  "(async, sync and a sync handler ignoring the stop), 2 x second signal",
                  request.node.nodeid, outcome,
                  notes="attempts given back on SIGTERM are not counted; jobs of a worker "
                        "stopped by a second signal are rescued when their lease expires"),
           started)


# -- 3 --------------------------------------------------------------------------------------


def test_job_that_kills_its_worker_is_discarded(
    db_url: str, chaos_dir: Path, started: float, request: pytest.FixtureRequest
) -> None:
    """Scenario 3: a job that kills its own process every time (os._exit, SIGKILL) ends
    discarded after max_attempts; the rest of the queue completes."""
    n = pick(60, 1000)
    poison = enqueue(db_url, [chaos.suicide.job("exit"), chaos.suicide.job("kill")])
    rest = enqueue(db_url, [chaos.work.job(0.02) for _ in range(n)])
    with Cluster(db_url, chaos_dir) as cluster, Observer(db_url) as observer:
        deadline = time.monotonic() + pick(90, 300)
        while not all_final(db_url):
            assert time.monotonic() < deadline, f"not done: {state_counts(db_url)}"
            while len(cluster.alive()) < 2:  # a supervisor: restart dead workers
                cluster.start("-c", "5", lease_ttl=1.0, heartbeat=0.2)
            time.sleep(0.05)
    deaths = sum(p.returncode not in (0, None) for p in cluster.procs)

    def expect(job: Job) -> str | None:
        if job.id in poison:
            lost = [e for e in job.errors if "lease expired" in e["error"]]
            if job.state != JobState.DISCARDED or job.attempt != 3 or len(lost) != 3:
                return f"poison job should be discarded after 3 lost leases: {job.state} {job.errors}"
            return None
        return completed(job)

    outcome = check(db_url, cluster.events(), poison + rest, observer, expect)
    finish(Result(3, "a job that kills its own worker every time", backend_of(db_url), n + 2,
                  f"2 poison jobs (os._exit, SIGKILL of self), 3 attempts each: {deaths} worker deaths",
                  request.node.nodeid, outcome,
                  notes="both poison jobs end discarded after max_attempts=3; innocent jobs "
                        "that shared a dying worker are rescued and counted as duplicates"),
           started)


# -- 4 --------------------------------------------------------------------------------------


def test_sigstop_past_the_lease_then_sigcont(
    db_url: str, chaos_dir: Path, started: float, request: pytest.FixtureRequest
) -> None:
    """Scenario 4: freeze a worker (SIGSTOP) longer than its lease: another worker
    rescues and completes its jobs; woken (SIGCONT), the frozen one's late outcomes are
    rejected by the fence and its still-running job is stopped."""
    reps = pick(1, 3)
    ids: list[int] = []
    with Cluster(db_url, chaos_dir) as cluster, Observer(db_url) as observer:
        for _ in range(reps):
            batch = enqueue(db_url, [chaos.work.job(1.5), chaos.work.job(1.5),
                                     chaos.work_sync.job(1.5), chaos.work_sync.job(1.5)])
            (long_job,) = enqueue(db_url, [chaos.work.job(30)])
            ids += [*batch, long_job]
            frozen = cluster.start("-c", "5", lease_ttl=1.0, heartbeat=0.2)
            def all_five(p: int = frozen.pid) -> bool:
                return len({e.job for e in cluster.events() if e.pid == p and e.kind == "start"}) == 5

            cluster.wait(all_five, 30, "the first worker to start all five jobs")
            # Frozen inside a write it would hold SQLite's write lock and stall the
            # rescuer too: freeze it between writes, so that only its leases run out.
            freeze_between_writes(frozen, db_url)
            rescuer = cluster.start("-c", "5", "--shutdown-timeout", "0.5", lease_ttl=1.0,
                                    heartbeat=0.2)

            def rescued(b: list[int] = batch, p: int = rescuer.pid) -> bool:
                rows = jobs(db_url)
                return all(rows[i].state == JobState.COMPLETED and rows[i].result == p for i in b)

            cluster.wait(rescued, 30, "the second worker to complete the frozen worker's jobs")
            cluster.wait(partial(cluster.ran_any, rescuer.pid, long_job), 10, "the long job to move")
            frozen.send_signal(signal.SIGCONT)
            # Woken, the worker learns from a heartbeat that its leases are gone and stops
            # the long job; its finished attempts are refused by the fence.
            cluster.wait(partial(cluster.ran_any, frozen.pid, long_job, "abort"), 10,
                         "the woken worker to stop the job it lost")
            text = cluster.output(frozen)
            assert "lease lost" in text or "rejected by the fence" in text
            rows = jobs(db_url)
            for job_id in batch:
                assert rows[job_id].attempt == 2 and rows[job_id].result == rescuer.pid
            frozen.send_signal(signal.SIGTERM)
            assert frozen.wait(timeout=15) == 0
            rescuer.send_signal(signal.SIGTERM)  # gives the long job back
            assert rescuer.wait(timeout=15) == 0
            cancel(db_url, long_job)  # so that the next round starts from an empty queue
        assert all_final(db_url)
    longs = set(ids[4::5])

    def expect(job: Job) -> str | None:
        if job.id in longs:
            return None if job.state == JobState.CANCELLED else f"long job {job.state}"
        return completed(job)

    outcome = check(db_url, cluster.events(), ids, observer, expect)
    assert outcome.duplicates >= 5 * reps
    finish(Result(4, "SIGSTOP a worker past its lease, then SIGCONT", backend_of(db_url),
                  len(ids), f"{reps} x SIGSTOP for > lease (1 s) with 5 jobs in flight",
                  request.node.nodeid, outcome,
                  notes="every frozen attempt is rescued and re-run (the duplicates); the woken "
                        "worker's late completions are refused by the fence, its long job stopped"),
           started)

