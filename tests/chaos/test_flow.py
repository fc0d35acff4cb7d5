"""Scenario 10: flow control across processes, under faults (both backends).

* (a) eight processes enqueue the same unique key at once, round after round: exactly
  one row per round, and every racer is handed that row;
* (b) cron on three worker processes across many per-second ticks while the leader is
  killed (``SIGKILL``): every tick enqueued exactly once, none missed across the
  takeover (the new leader finds the ticks due since the last one within the misfire
  grace and runs each of them), every tick job run, re-runs only after a lost lease;
* (c) a rate limit of 10/s held by four worker processes (in long mode one of them is
  killed half-way): no sliding one-second window over the limit;
* (d) debounce: two processes enqueue one ``Unique(on_conflict="replace")`` key as fast
  as they can while a worker runs it: each job runs once with one enqueue's arguments
  whole, at most one waits at a time, nothing is lost, the last write wins.

The workers run the flow-control tests' app (``tests/apps/flow.py``) and reuse the
helpers of ``tests/test_flow_processes.py``; the figures go to the report.
"""

from __future__ import annotations

import collections
import itertools
import multiprocessing
import os
import queue
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import Job, JobState
from conveyor._storage import LeaderRow

from .._runtime_util import gather_reports
from ..apps import debounce_app
from ..apps import flow as flow_app
from ..apps.flow import Flow
from ..conftest import wait_for
from ..test_flow_processes import (
    CLOCK_EPSILON,
    RATE,
    ROOT,
    Workers,
    completed,
    max_in_window,
    start_cluster,
    tick_epochs,
    tick_jobs,
)
from .harness import LEASE_EXPIRED, Outcome, Result, pick
from .test_processes import backend_of, finish

RACERS = 8
ROUNDS = pick(10, 100)
#: Leader kills in the cron scenario, and ticks to wait between them.
CRON_KILLS = pick(1, 4)
TICKS_BETWEEN = pick(2, 8)
LEADER_TTL = 2.0
RATE_JOBS = pick(25, 200)


@pytest.fixture
def flow(db_url: str) -> Iterator[Flow]:
    f = flow_app.build(db_url)
    try:
        yield f
    finally:
        f.app.close()


@pytest.fixture
def workers(db_url: str, chaos_dir: Path) -> Iterator[Workers]:
    w = Workers(db_url, chaos_dir / "ledger.txt")
    try:
        yield w
    finally:
        w.stop_all()  # SIGTERM, then SIGKILL by pid after 10 s


def rescued(job: Job) -> int:
    return sum(LEASE_EXPIRED in str(e.get("error", "")) for e in job.errors)


# -- (a) ---------------------------------------------------------------------------------------


def test_unique_key_raced_by_eight_processes(
    flow: Flow, db_url: str, started: float, request: pytest.FixtureRequest
) -> None:
    """Eight processes wait at a barrier and enqueue one round's key at once."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(RACERS)
    results: multiprocessing.Queue[tuple[int, str, int, bool, int]] = ctx.Queue()
    procs = [ctx.Process(target=flow_app.race_enqueue, args=(db_url, ROUNDS, barrier, results))
             for _ in range(RACERS)]
    got: list[tuple[int, str, int, bool, int]] = gather_reports(
        procs, results, RACERS * ROUNDS, timeout=60 + ROUNDS)

    rows = flow.app.list_jobs(limit=10_000)
    per_key = collections.Counter(job.unique_key for job in rows)
    out = Outcome(jobs=len(rows), states=dict(collections.Counter(j.state.value for j in rows)))
    v = out.violations
    inserted_per_round = []
    for n in range(ROUNDS):
        mine = [g for g in got if g[0] == n]
        ids = {job_id for _, _, job_id, _, _ in mine}
        inserted = sum(not duplicate for *_, duplicate, _ in mine)
        inserted_per_round.append(inserted)
        if len(mine) != RACERS or len({pid for *_, pid in mine}) != RACERS:
            v.append(f"round {n}: {len(mine)} enqueues from {len({g[4] for g in mine})} processes")
        if len(ids) != 1 or inserted != 1:
            v.append(f"round {n}: racers got jobs {sorted(ids)}, {inserted} say they inserted")
    extra_rows = sum(n - 1 for n in per_key.values())
    out.duplicates = extra_rows
    if len(rows) != ROUNDS or extra_rows:
        v.append(f"{len(rows)} rows for {ROUNDS} rounds: {per_key}")
    print(f"\nunique race: {ROUNDS} rounds x {RACERS} processes -> {len(rows)} rows; "
          f"inserted per round {collections.Counter(inserted_per_round)}")
    finish(Result(10, "unique key enqueued by 8 processes at once", backend_of(db_url),
                  RACERS * ROUNDS,
                  f"{ROUNDS} rounds x {RACERS} processes released by one barrier "
                  "(Unique(key=...) and .options(unique_key=...) alternately)",
                  request.node.nodeid, out,
                  notes="duplicates here = rows beyond one per key: the partial unique index "
                        "makes every other racer get the first row back (duplicate=True)",
                  extra={"rounds": ROUNDS, "processes": RACERS, "rows": len(rows),
                         "rows_per_round_max": max(per_key.values(), default=0),
                         "inserted_per_round_max": max(inserted_per_round)}), started)


# -- (b) ---------------------------------------------------------------------------------------


def test_cron_on_three_workers_across_leader_kills(
    flow: Flow, workers: Workers, db_url: str, started: float, request: pytest.FixtureRequest
) -> None:
    """Three workers tick a per-second schedule; the leader is killed -9 (and a fresh
    worker started) ``CRON_KILLS`` times, ``TICKS_BETWEEN`` ticks apart."""
    args = ("-q", "cron", "-c", "4", "--leader-ttl", str(LEADER_TTL))
    procs = start_cluster(flow, workers, wait_for, 3, "cron_app", *args)
    by_pid = {p.pid: p for p in procs}
    begin = time.time()
    takeovers: list[float] = []
    for _ in range(CRON_KILLS):
        wait_for(lambda: len(tick_epochs(flow)) >= 2, timeout=15, message="cron to tick")
        target = max(tick_epochs(flow)) + TICKS_BETWEEN

        def ticked(t: int = target) -> bool:
            return max(tick_epochs(flow)) >= t

        wait_for(ticked, timeout=30, interval=0.05, message="ticks before the kill")
        old = wait_for(flow.app.get_leader, timeout=10, message="a leader")
        assert old is not None
        node_pid = {n.id: n.pid for n in flow.app.list_nodes()}[old.node_id]
        victim: subprocess.Popen[bytes] = by_pid[node_pid]
        victim.send_signal(signal.SIGKILL)
        killed = time.time()
        victim.wait(timeout=10)
        def replaced(o: str = old.node_id) -> LeaderRow | None:
            row = flow.app.get_leader()
            return row if row is not None and row.node_id != o else None

        new = wait_for(replaced, timeout=LEADER_TTL * 3 + 10, interval=0.05,
                       message="a new leader")
        takeovers.append(round(time.time() - killed, 2))
        assert new and new.term > old.term
        for proc in start_cluster(flow, workers, wait_for, 1, "cron_app", *args):
            by_pid[proc.pid] = proc
    after = time.time()
    wait_for(lambda: max(tick_epochs(flow)) >= int(after) + 2, timeout=10, interval=0.05,
             message="ticks after the last takeover")
    end = time.time()
    epochs = tick_epochs(flow)
    wait_for(lambda: completed(flow, "flow_tick", len(epochs)), timeout=15, interval=0.1,
             message="every tick job to run")
    ticks = tick_jobs(flow)
    counts = collections.Counter(epochs)
    window = set(range(int(begin) + 1, int(end)))  # whole seconds the schedule was watched
    missed = sorted(set(range(min(epochs), max(epochs) + 1)) - set(epochs))
    uncovered = sorted(window - set(epochs))
    ran = collections.Counter(e.key for e in workers.entries("tick"))
    out = Outcome(jobs=len(ticks), states=dict(collections.Counter(j.state.value for j in ticks)),
                  executions=sum(ran.values()))
    out.leases_lost = sum(rescued(j) for j in ticks)
    v = out.violations
    out.lost = len(missed) + sum(j.state != JobState.COMPLETED for j in ticks)
    if missed or uncovered:
        v.append(f"missed ticks {missed}; not covered {uncovered}")
    if doubled := {e: n for e, n in counts.items() if n > 1}:
        v.append(f"ticks enqueued more than once: {doubled}")
    for job in ticks:
        runs = ran.get(str(job.meta.get("tick")), 0)
        if runs == 0:
            v.append(f"tick job {job.id} never ran")
        elif runs > 1:
            out.duplicates += runs - 1
            if rescued(job) < runs - 1:
                v.append(f"tick job {job.id} ran {runs} times without a lost lease")
    print(f"\ncron: {len(epochs)} ticks {min(epochs)}..{max(epochs)}, {CRON_KILLS} leader "
          f"kills, takeovers {takeovers} s, missed {missed}, re-runs {out.duplicates}")
    finish(Result(10, "cron on 3 workers, the leader killed -9", backend_of(db_url),
                  len(ticks),
                  f"{CRON_KILLS} x SIGKILL of the leader (leader TTL {LEADER_TTL:g} s) across "
                  f"{len(epochs)} per-second ticks; new leader after {', '.join(map(str, takeovers))} s",
                  request.node.nodeid, out,
                  notes="no tick missed: the new leader enqueues every tick due since the last "
                        "stored one (within the 30 s misfire grace); the unique key per tick "
                        "makes a tick enqueued twice impossible",
                  extra={"ticks": len(epochs), "missed": len(missed), "kills": CRON_KILLS,
                         "takeover_seconds": takeovers, "duplicate_rows": len(epochs) - len(counts),
                         "re_runs": out.duplicates}), started)


# -- (c) ---------------------------------------------------------------------------------------


def test_rate_limit_over_four_workers(
    flow: Flow, workers: Workers, db_url: str, started: float, request: pytest.FixtureRequest
) -> None:
    """``RATE_JOBS`` jobs of a 10/s task on four workers; in long mode one worker is killed
    -9 half-way (and replaced)."""
    args = ("-q", "rate", "-c", "10")
    procs = start_cluster(flow, workers, wait_for, 4, "app", *args)
    ids = [j.id for j in flow.app.enqueue_many([flow.rated.job(i) for i in range(RATE_JOBS)])]
    kills = pick(0, 1)
    if kills:
        wait_for(lambda: len(workers.entries("start", "flow_rated")) >= RATE_JOBS // 2,
                 timeout=60, interval=0.05, message="half of the jobs to start")
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(timeout=10)
        start_cluster(flow, workers, wait_for, 1, "app", *args)
    wait_for(lambda: completed(flow, "flow_rated", RATE_JOBS), timeout=RATE_JOBS / RATE + 60,
             interval=0.2, message=f"{RATE_JOBS} rate-limited jobs")
    rows = {j.id: j for j in flow.app.list_jobs(task="flow_rated", limit=10_000)}
    starts = workers.entries("start", "flow_rated")
    times = sorted(e.at for e in starts)
    first = times[0]
    histogram = collections.Counter(int(t - first) for t in times)
    per_second = [histogram.get(s, 0) for s in range(max(histogram) + 1)]
    strict = max_in_window(times, 1.0 - CLOCK_EPSILON)
    raw = max_in_window(times, 1.0)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    runs = collections.Counter(int(e.key) for e in starts)
    out = Outcome(jobs=len(ids), states=dict(collections.Counter(j.state.value for j in rows.values())),
                  executions=len(starts))
    out.leases_lost = sum(rescued(j) for j in rows.values())
    v = out.violations
    out.lost = sum(rows[i].state != JobState.COMPLETED for i in ids if i in rows) + len(set(ids) - set(rows))
    if sorted(runs) != list(range(RATE_JOBS)):
        v.append(f"jobs that never started: {sorted(set(range(RATE_JOBS)) - set(runs))}")
    by_arg = {j.args[0]: j for j in rows.values()}
    for arg, n in runs.items():
        if n > 1:
            out.duplicates += n - 1
            if rescued(by_arg[arg]) < n - 1:
                v.append(f"job {by_arg[arg].id} started {n} times without a lost lease")
    if strict > RATE:
        v.append(f"{strict} starts within one second (limit {RATE}/s): {per_second}")
    processes = len({e.pid for e in starts})
    print(f"\nrate {RATE}/s over {processes} processes: starts per second {per_second}; most "
          f"in a sliding 1 s window {raw} (minus {CLOCK_EPSILON}s: {strict}); smallest gap "
          f"{min(gaps) * 1000:.0f} ms")
    assert processes >= 2, "the budget is shared, not held by one process"
    finish(Result(10, f"rate limit {RATE}/s over 4 workers", backend_of(db_url), RATE_JOBS,
                  f"{RATE_JOBS} jobs on 4 processes" + (f", {kills} x SIGKILL half-way" if kills else ""),
                  request.node.nodeid, out,
                  notes="the budget is one GCRA cell in the database: starts are spaced evenly "
                        "whichever process claims them; per-second histograms below",
                  extra={"limit": RATE, "per_second": per_second, "max_window": raw,
                         "max_window_strict": strict, "processes": processes,
                         "min_gap_ms": round(min(gaps) * 1000), "kills": kills}), started)


# -- (d) ---------------------------------------------------------------------------------------


DEBOUNCE_ROUNDS = pick(150, 1000)
#: No debounce delay: each job is available at once, so the worker's claims race the
#: racers' replacements head on.
DEBOUNCE_DELAY = 0.0
#: Each racer pauses (up to 0.1 s) after this many enqueues: the job comes due meanwhile.
DEBOUNCE_PAUSE_EVERY = 20


def test_debounce_raced_by_two_processes(
    db_url: str, chaos_dir: Path, started: float, request: pytest.FixtureRequest
) -> None:
    """Two processes enqueue one ``Unique(on_conflict="replace")`` key as fast as they
    can (no delay) while a worker process claims and runs it: every job runs once,
    with the arguments of one enqueue whole (args and kwargs never mixed), at most one
    waits at a time, no enqueue is lost, and the last write wins."""
    env = {**os.environ, "CONVEYOR_URL": db_url,
           "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    log = open(chaos_dir / "worker-debounce.log", "wb")  # noqa: SIM115
    worker = subprocess.Popen(
        [sys.executable, "-m", "conveyor", "worker", "tests.apps.debounce_app:app",
         "--heartbeat-interval", "0.3", "--lease-ttl", "3", "--shutdown-timeout", "2",
         "--log-level", "warning"], env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    debounce = debounce_app.build(db_url)
    try:
        got, max_waiting = _race_debounce(db_url, debounce)
        final = debounce.index.enqueue(7, "final", tag="final")
        wait_for(lambda: _all_final(debounce), timeout=120, message="every debounced job ran")
        rows = debounce.app.list_jobs(limit=10_000)
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(timeout=10)
        debounce.app.close()
    out = Outcome(jobs=len(rows), states=dict(collections.Counter(j.state.value for j in rows)))
    v = out.violations
    by_id = {j.id: j for j in rows}
    lost = sorted({job_id for _, _, job_id, _, _ in got} - set(by_id))
    out.lost = len(lost)
    if lost:
        v.append(f"enqueues returned jobs that are gone: {lost[:10]}")
    mixed = [j.id for j in rows if j.args[1] != j.kwargs.get("tag")]
    not_once = [j.id for j in rows if j.state is not JobState.COMPLETED or j.attempt != 1]
    wrong = [j.id for j in rows if j.result != j.args[1]]
    out.executions = sum(j.attempt for j in rows)
    out.duplicates = sum(max(j.attempt - 1, 0) for j in rows)
    for what, ids in (("half-replaced arguments", mixed), ("not run exactly once", not_once),
                      ("a result from other arguments", wrong)):
        if ids:
            v.append(f"{len(ids)} job(s) with {what}: {ids[:10]}")
    if max_waiting > 1:
        v.append(f"{max_waiting} jobs waited for the key at once")
    last = by_id.get(final.id)
    if last is None or last.result != "final":
        v.append(f"the last write did not win: {last}")
    enqueues = len(got) + 1
    print(f"\ndebounce race: {enqueues} enqueues from 2 processes -> {len(rows)} jobs run; "
          f"at most {max_waiting} waiting at once")
    finish(Result(10, "debounce raced by two processes", backend_of(db_url), enqueues,
                  f"2 processes x {DEBOUNCE_ROUNDS} enqueues of one Unique(on_conflict="
                  f"'replace') key, no delay, a pause of up to "
                  f"0.1 s every {DEBOUNCE_PAUSE_EVERY}, a worker running them",
                  request.node.nodeid, out,
                  notes="each job must run once with one enqueue's arguments whole; the "
                        "last write (after the race) must be the one that runs last",
                  extra={"enqueues": enqueues, "jobs_run": len(rows), "max_waiting": max_waiting,
                         "half_replaced": len(mixed), "not_once": len(not_once),
                         "last_won": bool(last is not None and last.result == "final")}),
           started)


def _race_debounce(db_url: str, debounce: debounce_app.Debounce
                   ) -> tuple[list[tuple[str, int, int, bool, int]], int]:
    """Run the two racers; meanwhile count the jobs waiting for the key (the most seen)."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    results: Any = ctx.Queue()
    procs = [ctx.Process(target=debounce_app.hammer,
                         args=(db_url, who, DEBOUNCE_ROUNDS, DEBOUNCE_DELAY, barrier, results,
                               DEBOUNCE_PAUSE_EVERY))
             for who in ("a", "b")]
    for proc in procs:
        proc.start()
    got: list[tuple[str, int, int, bool, int]] = []
    max_waiting = 0
    try:
        deadline = time.monotonic() + 120 + DEBOUNCE_ROUNDS / 10
        while len(got) < 2 * DEBOUNCE_ROUNDS:
            try:
                got.append(results.get(timeout=max(deadline - time.monotonic(), 0.1)))
            except queue.Empty:
                raise AssertionError(f"only {len(got)} of {2 * DEBOUNCE_ROUNDS} enqueues "
                                     f"reported; exit codes {[p.exitcode for p in procs]}"
                                     ) from None
            if len(got) % 25 == 0:
                counts = debounce.app.count_jobs()
                max_waiting = max(max_waiting, sum(counts.get(s, 0) for s in (
                    "scheduled", "available", "retryable")))
        for proc in procs:
            proc.join(timeout=30)
            assert proc.exitcode == 0
    finally:
        for proc in procs:  # by pid, whatever happened
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=10)
    return got, max_waiting


def _all_final(debounce: debounce_app.Debounce) -> bool:
    counts = debounce.app.count_jobs()
    return sum(counts.get(s, 0) for s in ("scheduled", "available", "retryable", "running")) == 0
