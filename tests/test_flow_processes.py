"""Flow control across real `conveyor worker` processes, on both backends.

Cron on three workers, a unique-key race of eight processes, a rate limit held by four
workers, concurrency caps on three, live pause/resume/scale, a killed leader, and
explain_job with the reasons only a running cluster produces.

Timing: every wait is a condition with a deadline; the only plain sleeps let a
window elapse that the test then measures (the ticks of a span, a quiet queue).
Figures are printed (run with ``-s`` to see them).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import math
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from conveyor import Job, JobState
from conveyor._cron import ticks_to_run
from conveyor._storage import LeaderRow
from conveyor.cli._loading import retarget

from ._runtime_util import gather_reports, stop_processes
from .apps import flow as flow_app
from .apps.flow import Flow
from .conftest import WaitFor

ROOT = Path(__file__).resolve().parent.parent
APP = "tests.apps.flow"
#: Heartbeat often so that a started worker shows up in list_nodes() at once.
WORKER_ARGS = ("--heartbeat-interval", "0.3", "--lease-ttl", "3", "--shutdown-timeout", "2",
               "--log-level", "warning")
#: Queue settings reach every worker within one settings interval (1 s, +-10 %). Tests wait
#: for the effect itself (a quiet queue, a start, a single runner) with this deadline, which
#: only a change never picked up reaches; the pickup times measured are printed.
PICKUP_DEADLINE = 20.0
#: A gap between starts that a running "ctl" queue never shows (8 slots, 0.4 s jobs start
#: several times a second) and longer than one settings interval: the queue is quiet.
QUIET = 1.5
#: How long a single runner must be observed alone (several 0.4 s jobs in a row).
SINGLE_WINDOW = 2.0


@dataclasses.dataclass(frozen=True)
class Entry:
    event: str
    task: str
    job: int
    key: str
    at: float
    pid: int


class Workers:
    """Starts `conveyor worker` processes on one database; cleans every one up by pid."""

    def __init__(self, db_url: str, ledger: Path) -> None:
        self.db_url, self.ledger = db_url, ledger
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, attr: str, *args: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, "CONVEYOR_URL": self.db_url, "CONVEYOR_TEST_LEDGER": str(self.ledger),
               "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
        cmd = [sys.executable, "-m", "conveyor", "worker", f"{APP}:{attr}", *WORKER_ARGS, *args]
        log = open(self.ledger.with_name(f"worker-{len(self.procs)}.log"), "wb")  # noqa: SIM115
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.procs.append(proc)
        return proc

    def output(self) -> str:
        return "\n".join(
            f"--- worker {i} (pid {p.pid}, exit {p.poll()}) ---\n"
            + self.ledger.with_name(f"worker-{i}.log").read_text(errors="replace")
            for i, p in enumerate(self.procs)
        )

    def entries(self, event: str | None = None, task: str | None = None) -> list[Entry]:
        if not self.ledger.exists():
            return []
        out = []
        for line in self.ledger.read_text().splitlines():
            ev, name, job, key, at, pid = line.split()
            if (event is None or ev == event) and (task is None or name == task):
                out.append(Entry(ev, name, int(job), key, float(at), int(pid)))
        return out

    def stop_all(self) -> None:
        stop_processes(self.procs, 10)


@pytest.fixture
def workers(db_url: str, tmp_path: Path) -> Iterator[Workers]:
    w = Workers(db_url, tmp_path / "ledger.txt")
    try:
        yield w
    finally:
        w.stop_all()


@pytest.fixture
def flow(db_url: str) -> Iterator[Flow]:
    """An app on this test's database that knows the workers' tasks and limits."""
    f = flow_app.build(db_url)
    try:
        yield f
    finally:
        f.app.close()


# -- helpers -----------------------------------------------------------------------------------


def start_cluster(flow: Flow, workers: Workers, wait_for: WaitFor, n: int, attr: str,
                  *args: str) -> list[subprocess.Popen[bytes]]:
    """Start ``n`` workers and wait until each one is registered as a live node."""
    procs = [workers.start(attr, *args) for _ in range(n)]
    pids = {p.pid for p in procs}

    def registered() -> bool:
        dead = [p for p in procs if p.poll() is not None]
        assert not dead, f"a worker exited early:\n{workers.output()}"
        return pids <= {node.pid for node in flow.app.list_nodes() if node.alive}

    wait_for(registered, timeout=30, interval=0.05, message=f"{n} workers to register")
    return procs


def max_overlap(intervals: Iterable[tuple[float, float]]) -> int:
    """Most intervals open at one instant; one that ends as another starts does not count."""
    events = sorted((t, delta) for start, end in intervals for t, delta in ((start, 1), (end, -1)))
    best = current = 0
    for _, delta in events:  # at equal times -1 sorts first
        current += delta
        best = max(best, current)
    return best


def intervals(entries: list[Entry], until: float = math.inf) -> dict[int, tuple[float, float]]:
    """job id -> (start, end) from a ledger; a job still running ends at ``until``."""
    starts = {e.job: e.at for e in entries if e.event == "start"}
    ends = {e.job: e.at for e in entries if e.event == "end"}
    return {job: (at, ends.get(job, until)) for job, at in starts.items()}


def max_in_window(times: list[float], width: float) -> int:
    """Most of ``times`` inside any half-open window [t, t + width)."""
    times = sorted(times)
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while times[lo] <= t - width:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def tick_jobs(flow: Flow) -> list[Job]:
    return flow.app.list_jobs(task="flow_tick", limit=10_000)


def tick_epochs(flow: Flow) -> list[int]:
    """The tick of every cron job, from its unique key ``cron:<schedule>:<epoch>``."""
    out = []
    for job in tick_jobs(flow):
        assert job.unique_key is not None and job.unique_key.startswith("cron:every-second:"), job
        epoch = int(job.unique_key.rsplit(":", 1)[1])
        assert job.meta["schedule"] == "every-second"
        assert datetime.fromisoformat(job.meta["tick"]).timestamp() == epoch, job.meta
        out.append(epoch)
    return out


def assert_ticks_exact(epochs: list[int], must_cover: range) -> None:
    """No tick twice, none missing between the first and the last, and the window covered."""
    counts = collections.Counter(epochs)
    duplicates = {e: n for e, n in counts.items() if n > 1}
    assert not duplicates, f"ticks enqueued more than once: {duplicates}"
    missing = sorted(set(range(min(epochs), max(epochs) + 1)) - set(epochs))
    assert not missing, f"missed ticks {missing} between {min(epochs)} and {max(epochs)}"
    assert set(must_cover) <= set(epochs), (
        f"window {must_cover.start}..{must_cover.stop - 1} not covered by {min(epochs)}..{max(epochs)}")


def completed(flow: Flow, task: str, n: int) -> bool:
    return len(flow.app.list_jobs(task=task, state=JobState.COMPLETED, limit=10_000)) >= n


# -- 1. cron on three workers ---------------------------------------------------------------------

CRON_WINDOW = 8.0


def test_cron_on_three_workers_enqueues_every_tick_once(
    flow: Flow, workers: Workers, wait_for: WaitFor
) -> None:
    start_cluster(flow, workers, wait_for, 3, "cron_app", "-q", "cron", "-c", "4")
    begin = time.time()
    time.sleep(CRON_WINDOW)  # the span whose ticks are checked
    end = time.time()
    # The tick of the window's last second is enqueued within about one scheduler pass.
    wait_for(lambda: max(tick_epochs(flow), default=0) >= int(end), timeout=5,
             message="the window's last tick")
    epochs = tick_epochs(flow)
    leader = flow.app.get_leader()
    window = range(math.ceil(begin), int(end) + 1)
    print(f"\ncron: {len(epochs)} ticks {min(epochs)}..{max(epochs)}, window {len(window)} s, "
          f"leader {leader.node_id if leader else None}")
    assert_ticks_exact(epochs, window)
    # Every tick job also ran exactly once.
    wait_for(lambda: completed(flow, "flow_tick", len(epochs)), timeout=10, message="ticks to run")
    ran = collections.Counter(e.key for e in workers.entries("tick"))
    assert len(ran) == len(epochs) and set(ran.values()) == {1}, ran


# -- 2. unique-key race -----------------------------------------------------------------------------

RACERS, ROUNDS = 8, 6


def test_eight_processes_enqueue_one_unique_key_at_once(flow: Flow, db_url: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(RACERS)
    results: multiprocessing.Queue[tuple[int, str, int, bool, int]] = ctx.Queue()
    procs = [ctx.Process(target=flow_app.race_enqueue, args=(db_url, ROUNDS, barrier, results))
             for _ in range(RACERS)]
    got: list[tuple[int, str, int, bool, int]] = gather_reports(
        procs, results, RACERS * ROUNDS, timeout=60)

    rows = flow.app.list_jobs(limit=1000)
    by_key = collections.Counter(job.unique_key for job in rows)
    assert len(rows) == ROUNDS and set(by_key.values()) == {1}, by_key
    for n in range(ROUNDS):
        mine = [r for r in got if r[0] == n]
        assert len(mine) == RACERS and len({pid for *_, pid in mine}) == RACERS
        ids = {job_id for _, _, job_id, _, _ in mine}
        assert len(ids) == 1, f"round {n}: the racers got different jobs {ids}"
        inserted = [r for r in mine if not r[3]]
        assert len(inserted) == 1, f"round {n}: {len(inserted)} racers say they inserted"
        (row,) = [job for job in rows if job.id in ids]
        task = "flow_unique" if n % 2 == 0 else "flow_plain"
        assert row.task == task and row.unique_key == f"{task}:round-{n}"
    print(f"\nunique race: {ROUNDS} rounds x {RACERS} processes -> {len(rows)} rows, "
          f"{sum(r[3] for r in got)} duplicates reported")


# -- 3. rate limit across four workers --------------------------------------------------------------

RATE, JOBS = 10, 60
#: Starts are spaced by the database clock when the budget is taken; the handler's wall
#: clock reads them a few milliseconds later, by a varying amount.
CLOCK_EPSILON = 0.05


def test_rate_limit_holds_across_four_workers(
    flow: Flow, workers: Workers, wait_for: WaitFor
) -> None:
    start_cluster(flow, workers, wait_for, 4, "app", "-q", "rate", "-c", "10")
    flow.app.enqueue_many([flow.rated.job(i) for i in range(JOBS)])
    wait_for(lambda: completed(flow, "flow_rated", JOBS), timeout=60, interval=0.2,
             message=f"{JOBS} rate-limited jobs")
    starts = workers.entries("start", "flow_rated")
    assert sorted(int(e.key) for e in starts) == list(range(JOBS)), "each job started once"
    times = sorted(e.at for e in starts)
    first = times[0]
    histogram = collections.Counter(int(t - first) for t in times)
    per_second = [histogram.get(s, 0) for s in range(max(histogram) + 1)]
    strict = max_in_window(times, 1.0 - CLOCK_EPSILON)
    raw = max_in_window(times, 1.0)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    print(f"\nrate {RATE}/s over {len({e.pid for e in starts})} processes: starts per second "
          f"{per_second}; span {times[-1] - first:.2f}s; most in a sliding 1 s window {raw} "
          f"(minus {CLOCK_EPSILON}s: {strict}); smallest gap {min(gaps) * 1000:.0f} ms")
    assert strict <= RATE, per_second
    assert times[-1] - first >= (JOBS - 1) / RATE - 0.5, "the budget spaces the starts"
    assert len({e.pid for e in starts}) >= 2, "the budget is shared, not held by one process"
    # No job paid an attempt for waiting.
    assert all(j.attempt == 1 for j in flow.app.list_jobs(task="flow_rated", limit=100))


# -- 4. concurrency caps -------------------------------------------------------------------------

def test_concurrency_caps_hold_across_three_workers(
    flow: Flow, workers: Workers, wait_for: WaitFor
) -> None:
    start_cluster(flow, workers, wait_for, 3, "app", "-q", "caps", "-c", "5")
    users = ["ann", "bob", "cy"]
    flow.app.enqueue_many([flow.capped.job(0.25) for _ in range(12)]
                          + [flow.per_user.job(u, 0.25) for _ in range(4) for u in users])
    wait_for(lambda: completed(flow, "flow_capped", 12) and completed(flow, "flow_per_user", 12),
             timeout=60, interval=0.1, message="every capped job")

    capped = intervals(workers.entries(task="flow_capped"))
    assert len(capped) == 12
    capped_overlap = max_overlap(capped.values())
    per_user = workers.entries(task="flow_per_user")
    user_overlap = {u: max_overlap(intervals([e for e in per_user if e.key == u]).values())
                    for u in users}
    all_users = max_overlap(intervals(per_user).values())
    processes = len({e.pid for e in workers.entries("start")})
    print(f"\nconcurrency on {processes} processes: flow_capped (cap 2) max overlap "
          f"{capped_overlap}; per user (cap 1) {user_overlap}; all users together {all_users}")
    assert capped_overlap <= 2
    assert all(n <= 1 for n in user_overlap.values()), user_overlap
    # The caps were reached, and per-key limits leave other keys free to run.
    assert capped_overlap == 2 and all_users >= 2
    assert all(j.attempt == 1 for j in flow.app.list_jobs(limit=100)), "waiting used no attempt"


# -- 5. pause, resume and scale reach running workers --------------------------------------------


def test_pause_resume_and_scale_reach_running_workers(
    flow: Flow, workers: Workers, wait_for: WaitFor
) -> None:
    start_cluster(flow, workers, wait_for, 2, "app", "-q", "ctl", "-c", "4")
    flow.app.enqueue_many([flow.ctl.job(0.4) for _ in range(200)])

    def starts_after(t: float) -> list[float]:
        return sorted(e.at for e in workers.entries("start") if e.at > t)

    wait_for(lambda: len(workers.entries("start")) >= 8, timeout=20, message="jobs to start")

    # Pause: starts stop once the workers pick the setting up, and the queue goes quiet.
    paused_at = time.time()
    flow.app.pause_queue("ctl")

    def quiet_since_pause() -> bool:
        late = starts_after(paused_at)
        return time.time() - (late[-1] if late else paused_at) >= QUIET

    wait_for(quiet_since_pause, timeout=PICKUP_DEADLINE + QUIET, interval=0.05,
             message=f"no start for {QUIET}s after the pause")
    late = starts_after(paused_at)
    stopped_after = (late[-1] - paused_at) if late else 0.0
    waiting = flow.app.count_jobs(queue="ctl")["available"]
    assert waiting > 0, "the queue went quiet because it ran dry, not because it was paused"
    # Resume: starts come back.
    resumed_at = time.time()
    flow.app.resume_queue("ctl")
    wait_for(lambda: starts_after(resumed_at), timeout=PICKUP_DEADLINE,
             message="a start after resume")
    resumed_after = starts_after(resumed_at)[0] - resumed_at
    # Both workers are busy again: up to 4 + 4 jobs at once.
    wait_for(lambda: max_overlap(intervals(workers.entries(), time.time()).values()) >= 5,
             timeout=10, message="both workers running jobs")
    before = max_overlap(intervals(workers.entries(), time.time()).values())

    # Scale: a total of 1, split across the two live nodes (1 + 0). Wait until the ledger
    # shows the last SINGLE_WINDOW seconds run by one job at a time, on one node, with
    # several starts (running, not stalled).
    scaled_at = time.time()
    flow.app.set_queue_concurrency("ctl", 1)
    seen: dict[str, Any] = {}

    def single_runner() -> bool:
        now = time.time()
        since = now - SINGLE_WINDOW
        if since < scaled_at:
            return False
        window = [(s, e) for s, e in intervals(workers.entries(), now).values() if e > since]
        starts = [e for e in workers.entries("start") if e.at > since]
        seen.update(window=window, pids={e.pid for e in starts}, since=since)
        return len(starts) >= 3 and max_overlap(window) == 1 and len(seen["pids"]) == 1

    wait_for(single_runner, timeout=PICKUP_DEADLINE + SINGLE_WINDOW, interval=0.1,
             message="one job at a time on one node after set_queue_concurrency(1)")
    window, pids = seen["window"], seen["pids"]
    after = max_overlap(window)
    print(f"\nqueue control: last start {stopped_after:.2f}s after pause "
          f"({len(late)} starts in that time); first start {resumed_after:.2f}s after resume; "
          f"overlap {before} before scale, {after} from {seen['since'] - scaled_at:.2f}s after "
          f"set_queue_concurrency(1) ({len(window)} jobs in the window, on {len(pids)} node(s))")
    assert after == 1, window
    assert len(pids) == 1, "a total of 1 runs on one node (fair split 1 + 0)"
    flow.app.pause_queue("ctl")  # let the workers stop fast


# -- 6. a killed leader is replaced ---------------------------------------------------------------

LEADER_TTL = 2.0
#: How long after the dead leader's lease has run out a takeover may take before the test
#: gives up: the survivors ask every TTL/3 s, so only a takeover that never comes (or a
#: machine stalled for many election passes) reaches it.
TAKEOVER_DEADLINE = 30.0


@dataclasses.dataclass(frozen=True)
class Lease:
    """The leader row as stored, expired or not (``get_leader`` hides an expired one),
    in unix seconds of the database clock, with that clock's reading."""

    node_id: str
    term: int
    elected_at: float
    expires_at: float
    db_now: float


def leader_lease(db_url: str) -> Lease:
    if db_url.startswith("sqlite"):
        import sqlite3

        with contextlib.closing(sqlite3.connect(db_url.removeprefix("sqlite:///"))) as conn:
            row = conn.execute(
                "SELECT node_id, term, elected_at, expires_at, "
                "(julianday('now') - 2440587.5) * 86400.0 FROM conveyor_leader").fetchone()
        assert row is not None, "no leader row"
        return Lease(row[0], row[1], row[2], row[3], row[4])
    import psycopg

    with psycopg.connect(db_url) as pg:
        found = pg.execute("SELECT node_id, term, elected_at, expires_at, now() "
                           "FROM conveyor_leader").fetchone()
    assert found is not None, "no leader row"
    return Lease(found[0], found[1], *(t.timestamp() for t in found[2:]))


def test_killed_leader_is_replaced_and_cron_goes_on(
    flow: Flow, workers: Workers, wait_for: WaitFor
) -> None:
    procs = start_cluster(flow, workers, wait_for, 3, "cron_app", "-q", "cron", "-c", "4",
                          "--leader-ttl", str(LEADER_TTL))
    by_pid = {p.pid: p for p in procs}
    old = wait_for(flow.app.get_leader, timeout=10, message="a leader")
    assert old is not None
    wait_for(lambda: len(tick_epochs(flow)) >= 2, timeout=10, message="cron to tick")
    nodes = {n.id: n for n in flow.app.list_nodes()}
    victim = by_pid[nodes[old.node_id].pid]

    before = leader_lease(workers.db_url)  # the dead leader's lease ends no earlier
    victim.send_signal(signal.SIGKILL)
    killed_at = time.time()
    victim.wait(timeout=10)
    # The lease the dead leader last renewed (it cannot renew again), as the database
    # holds it; should a survivor have taken over already, the one read before the kill.
    after_kill = leader_lease(workers.db_url)
    lease = after_kill if after_kill.node_id == old.node_id else before
    assert lease.node_id == old.node_id and lease.term == old.term

    def replaced() -> LeaderRow | None:
        row = flow.app.get_leader()
        return row if row is not None and row.node_id != old.node_id else None

    remaining = max(0.0, lease.expires_at - after_kill.db_now)
    new = wait_for(replaced, timeout=remaining + TAKEOVER_DEADLINE, interval=0.05,
                   message=f"a new leader within {TAKEOVER_DEADLINE}s of the old lease's end")
    assert new is not None
    takeover = time.time() - killed_at
    assert new.term > old.term
    assert nodes[new.node_id].pid in by_pid and nodes[new.node_id].pid != victim.pid
    # Not before the dead leader's lease ran out, on the database's clock (which set both).
    late = new.elected_at.timestamp() - lease.expires_at
    assert late >= 0, f"elected {-late:.3f}s before the dead leader's lease ran out"

    # Cron goes on under the new leader: every tick once, none lost across the takeover.
    after = time.time()
    wait_for(lambda: max(tick_epochs(flow)) >= int(after) + 2, timeout=8,
             message="ticks under the new leader")
    epochs = tick_epochs(flow)
    print(f"\nleader: term {old.term} -> {new.term}, new leader {takeover:.2f}s after kill -9, "
          f"{late:.2f}s after the old lease ran out (TTL {LEADER_TTL}s); {len(epochs)} ticks "
          f"{min(epochs)}..{max(epochs)}, kill at {killed_at:.1f}")
    assert_ticks_exact(epochs, range(int(killed_at) - 1, int(after) + 3))


# -- 7. explain_job in a running cluster --------------------------------------------------------------


def reason(flow: Flow, job: Job, needle: str) -> list[str]:
    """The job's reasons if one contains ``needle`` (else [] so that wait_for retries)."""
    reasons = flow.app.explain_job(job.id).reasons
    return reasons if any(needle in r for r in reasons) else []


def test_explain_names_what_holds_jobs_back_in_a_cluster(
    flow: Flow, workers: Workers, wait_for: WaitFor, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    flow.app.pause_queue("paused")  # before the worker starts: it never fetches from it
    paused = flow.ctl.options(queue="paused").enqueue(0.0)
    unserved = flow.ctl.options(queue="unserved").enqueue(0.0)
    (proc,) = start_cluster(flow, workers, wait_for, 1, "app", "-q", "explain,paused", "-c", "5")
    node = next(n for n in flow.app.list_nodes() if n.pid == proc.pid)

    # Paused queue, served by a live worker: the pause is the one reason.
    reasons = flow.app.explain_job(paused.id).reasons
    assert len(reasons) == 1 and reasons[0].startswith("queue 'paused' is paused"), reasons
    # No live worker serves the queue.
    reasons = flow.app.explain_job(unserved.id).reasons
    assert reasons == ["no live worker serves queue 'unserved'"], reasons

    # Rate limit: of two jobs of a 1/m task one starts, the other waits for the refill.
    rated = flow.app.enqueue_many([flow.slow_rate.job(1), flow.slow_rate.job(2)])
    wait_for(lambda: completed(flow, "flow_slow_rate", 1), timeout=10, message="one rated job")
    (waiting,) = [j for j in rated
                  if (now := flow.app.get_job(j.id)) is not None and now.state != JobState.COMPLETED]
    reasons = wait_for(lambda: reason(flow, waiting, "rate limit 1/m for key 'task:flow_slow_rate' "
                                      "is used up; the next start is allowed at"),
                       timeout=10, message="the rate-limit reason")
    assert any(r.startswith("it is scheduled for") for r in reasons), reasons

    # Concurrency key busy: the first job of user u1 holds the slot until the gate opens.
    first = flow.gated.enqueue(str(gate), "u1")
    wait_for(lambda: workers.entries("start", "flow_gated"), timeout=10, message="the holder")
    running = flow.app.explain_job(first.id).reasons
    assert running[0].startswith(f"it is running: attempt 1 on node {node.id}"), running
    second = flow.gated.enqueue(str(gate), "u1")
    reasons = wait_for(lambda: reason(flow, second, "concurrency limit 1 for key 'flow_gated:u1' is "
                                      f"reached; held by job(s) #{first.id}"),
                       timeout=10, message="the concurrency reason")
    print(f"\nexplain: paused -> {flow.app.explain_job(paused.id).summary!r}\n"
          f"  unserved -> {flow.app.explain_job(unserved.id).summary!r}\n"
          f"  rate limited -> {reasons_text(flow, waiting)}\n  concurrency -> {reasons}")
    assert not workers.entries("start", "flow_ctl")

    # Every reason lifts: open the gate, resume the queue.
    gate.touch()
    flow.app.resume_queue("paused")
    wait_for(lambda: completed(flow, "flow_gated", 2) and completed(flow, "flow_ctl", 1),
             timeout=15, message="the held jobs to run")
    spans = intervals(workers.entries(task="flow_gated"))
    assert spans[first.id][1] <= spans[second.id][0], "the second waited for the first"
    assert flow.app.explain_job(paused.id).reasons[0].startswith("it completed")


def reasons_text(flow: Flow, job: Job) -> list[str]:
    return flow.app.explain_job(job.id).reasons


# -- regressions --------------------------------------------------------------------------------


def test_due_ticks_of_a_late_pass_all_run_while_schedulers_are_up() -> None:
    # A pass 2.05 s after the last tick of a per-second schedule (a jittered interval, a
    # slow database, a leader takeover) finds two ticks due; neither was missed.
    last = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    now = last + timedelta(seconds=2.05)
    for misfire, backfill in (("run_once", 0), ("backfill", 1), ("skip", 0)):
        ticks, newest = ticks_to_run("* * * * * *", "UTC", misfire, backfill, last, now, 30.0)
        assert [t.second for t in ticks] == [1, 2], misfire
        assert newest == last + timedelta(seconds=2)
    # A real outage (longer than the grace) is still coalesced by run_once.
    ticks, _ = ticks_to_run("* * * * * *", "UTC", "run_once", 0, last, last + timedelta(minutes=5), 30.0)
    assert len(ticks) == 1


def test_worker_on_another_url_keeps_limits_schedules_and_hooks(tmp_path: Path) -> None:
    # `conveyor worker APP --url URL` (and `jobs explain --url`) retarget an app whose own
    # URL differs: every flow-control option and schedule must come along.
    original = flow_app.build(f"sqlite:///{tmp_path / 'a.db'}", cron=True)
    copy = retarget(original.app, f"sqlite:///{tmp_path / 'b.db'}")
    try:
        assert copy.url.endswith("b.db")
        assert {n: t.defaults for n, t in copy.tasks.items()} == {
            n: t.defaults for n, t in original.app.tasks.items()}
        assert copy.tasks["flow_rated"].defaults.rate_limit is not None
        assert copy.schedules == original.app.schedules and "every-second" in copy.schedules
        assert copy.hooks is original.app.hooks
    finally:
        copy.close()
        original.app.close()
