"""Scenario 14: the soak. Mixed load for a long time with periodic ``kill -9``.

An open-loop producer enqueues a mix of jobs at a fixed rate (successes, async and sync,
retries, snoozes, jobs cancelled while running or scheduled) into three ``conveyor
worker`` processes that keep finished jobs for only ``RETENTION`` seconds
(``--completed-retention/--discarded-retention``), so the leader's pruner deletes them
all along. Every ``KILL_EVERY`` seconds one worker is killed (``SIGKILL``) and a fresh one
started; the *sentinel* worker is never killed, so its memory covers the whole run.

Sampled meanwhile: the RSS of every worker process (``/proc/PID/status``) every
``RSS_EVERY`` seconds, the table (rows per state; on PostgreSQL also
``pg_total_relation_size``; on SQLite the file sizes), and completions per window.
At the end the queue drains and the invariants of the harness are checked over every
job: the ones the pruner deleted are checked from the observer's last snapshot, and the
observer also checks that no final row changed and none was deleted before its retention.

Not part of quick mode: it runs under ``CONVEYOR_CHAOS=long`` (10 minutes per backend by
default) or whenever ``CONVEYOR_SOAK_SECONDS`` is set, e.g.::

    CONVEYOR_SOAK_SECONDS=1800 .venv/bin/pytest 'tests/chaos/test_soak.py::test_soak[postgres]'
"""

from __future__ import annotations

import collections
import dataclasses
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, InvalidStateError, Job, JobNotFoundError, JobSpec, JobState

from . import app as chaos
from .harness import (
    FINAL,
    LONG,
    Cluster,
    Observer,
    Result,
    all_final,
    check,
    execute,
    jobs,
    now,
    query,
    rebind,
    rng,
    state_counts,
)
from .test_processes import backend_of, finish

#: Seconds of load; 0 skips the soak (quick mode without the variable).
SECONDS = float(os.environ.get("CONVEYOR_SOAK_SECONDS") or (600 if LONG else 0))
#: Jobs enqueued per second.
RATE = float(os.environ.get("CONVEYOR_SOAK_RATE") or 40)
WORKERS, SLOTS = 3, 10
#: Finished jobs are kept this long (worker flags), then pruned.
RETENTION = 20.0
#: WorkerConfig.prune_interval (not a CLI flag): a new leader prunes within one interval.
PRUNE_INTERVAL = 60.0
LEADER_TTL = 3.0
#: A kill every 20-30 s in runs under 20 minutes, every 1-2 minutes in longer ones.
KILL_EVERY = (20.0, 30.0) if SECONDS < 1200 else (60.0, 120.0)
RSS_EVERY = 3.0
TABLE_EVERY = 5.0
#: Memory is compared from the end of the warm-up on.
WARMUP = min(120.0, max(SECONDS / 5, 30.0))
#: Bound on the sentinel's RSS growth after the warm-up.
RSS_BOUND_MB = 30.0
WINDOW = 60.0 if SECONDS >= 300 else 15.0
#: On a PostgreSQL server running with ``autovacuum = off`` (this machine's test server),
#: the soak runs ``VACUUM conveyor_jobs`` this often itself, standing in for autovacuum
#: (``CONVEYOR_SOAK_VACUUM=0`` turns that off, to watch the dead tuples pile up).
VACUUM_EVERY = 60.0
#: Rows the table may hold: what arrives during the retention plus two prune intervals
#: (a new leader's pruner may be a whole interval out of phase), a leader takeover and
#: a margin.
ROW_BOUND = int(RATE * (RETENTION + 2 * PRUNE_INTERVAL * 1.1 + LEADER_TTL + 30))

pytestmark = pytest.mark.skipif(
    not SECONDS, reason="the soak runs in long mode (CONVEYOR_CHAOS=long) or with "
                        "CONVEYOR_SOAK_SECONDS")


# -- the load ---------------------------------------------------------------------------------


class Load(threading.Thread):
    """Enqueues ``RATE`` jobs a second in batches every 0.25 s, and cancels the jobs
    meant to be cancelled 0.3-1.5 s after their enqueue (running or still scheduled)."""

    TICK = 0.25

    def __init__(self, url: str, seed: str) -> None:
        super().__init__(name="soak-load", daemon=True)
        self.url, self.r = url, rng(seed)
        self.stop = threading.Event()
        self.ids: list[int] = []
        self.cancel_targets: set[int] = set()
        self.cancels = 0
        self.kinds: collections.Counter[str] = collections.Counter()
        self.enqueued_at: list[float] = []
        self.error: BaseException | None = None

    def spec(self) -> tuple[str, JobSpec]:
        r = self.r
        roll = r.random()
        if roll < 0.50:
            return "async", chaos.work.job(r.uniform(0.01, 0.2))
        if roll < 0.65:
            return "sync", chaos.work_sync.job(r.uniform(0.01, 0.1))
        if roll < 0.75:
            return "retry", chaos.flaky.job(r.choice([1, 2]))
        if roll < 0.82:
            return "snooze", chaos.snooze_once.job(0.5)
        if roll < 0.88:
            return "cancel running", chaos.work.job(3.0)
        if roll < 0.93:
            return "cancel scheduled", chaos.work.options(delay=5.0).job(0.01)
        return "long", chaos.work_sync.job(r.uniform(0.5, 2.0))

    def run(self) -> None:
        app = Conveyor(self.url)
        pending: collections.deque[tuple[float, int]] = collections.deque()
        carry = 0.0
        try:
            next_at = now()
            while not self.stop.is_set():
                carry += RATE * self.TICK
                batch = [self.spec() for _ in range(int(carry))]
                carry -= int(carry)
                if batch:
                    made = app.enqueue_many(rebind(app, [s for _, s in batch]))
                    t = now()
                    for (kind, _), job in zip(batch, made, strict=True):
                        self.ids.append(job.id)
                        self.enqueued_at.append(t)
                        self.kinds[kind] += 1
                        if kind.startswith("cancel"):
                            self.cancel_targets.add(job.id)
                            pending.append((t + self.r.uniform(0.3, 1.5), job.id))
                while pending and pending[0][0] <= now():
                    _, job_id = pending.popleft()
                    try:
                        app.cancel_job(job_id)
                        self.cancels += 1
                    except (InvalidStateError, JobNotFoundError):
                        pass  # it finished first: the race is part of the load
                next_at += self.TICK
                self.stop.wait(max(next_at - now(), 0))
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            app.close()


# -- the observer -------------------------------------------------------------------------------


def _compact(job: Job) -> Job:
    """What the checker needs of a job, small enough to keep for every job of a soak."""
    errors = [{"attempt": e.get("attempt"), "error": str(e.get("error", ""))[:80]}
              for e in job.errors]
    return dataclasses.replace(job, args=[], kwargs={}, result=None, meta={}, tags=[],
                               errors=errors)


class SoakObserver(Observer):
    """The harness's observer for a table the pruner empties: keeps the last snapshot of
    every final job, checks that a final row never changes, and that a row is deleted
    only once it was final for ``retention`` seconds (to within one poll)."""

    def __init__(self, url: str, retention: float, interval: float = 1.0) -> None:
        super().__init__(url, interval)
        self.retention = retention
        self.app = Conveyor(url)
        self.snapshot: dict[int, Job] = {}
        self.gone: set[int] = set()
        self._results: dict[int, Any] = {}

    def __enter__(self) -> SoakObserver:
        super().__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)
        finally:
            self.app.close()

    def _final_rows(self) -> dict[int, Job]:
        out: dict[int, Job] = {}
        for state in FINAL:
            before: int | None = None
            while True:
                page = self.app.list_jobs(state=state, limit=10_000, before_id=before)
                out.update((j.id, j) for j in page)
                if len(page) < 10_000:
                    break
                before = page[-1].id
        return out

    def poll(self) -> None:
        current = self._final_rows()
        seen_at, wall = now(), time.time()  # after the read
        v = self.violations
        for job_id, snap in self.snapshot.items():
            if job_id in self.gone or job_id in current:
                continue
            row = self.app.get_job(job_id)
            if row is None:  # deleted: by the pruner, and only after its retention
                self.gone.add(job_id)
                assert snap.finished_at is not None
                early = snap.finished_at.timestamp() + self.retention - wall
                if early > 1.0:
                    v.append(f"job {job_id} ({snap.state.value}) was deleted {early:.1f}s "
                             "before its retention")
            else:
                current[job_id] = row  # a final job that is not final any more
        for job_id, job in current.items():
            last = self.snapshot.get(job_id)
            if last is not None and (job.state != last.state or job.attempt != last.attempt
                                     or self._results.get(job_id) != job.result):
                v.append(f"job {job_id} was {last.state.value} (attempt {last.attempt}) and "
                         f"then became {job.state.value} (attempt {job.attempt})")
            if job.state in FINAL:
                if last is None:
                    self.snapshot[job_id] = _compact(job)
                    self._results[job_id] = job.result
                if job.state == JobState.COMPLETED and job_id not in self.completed:
                    self.completed[job_id] = (seen_at, job.attempt, repr(job.result))
        self.polls += 1


# -- sampling ---------------------------------------------------------------------------------


def rss_kb(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None


@dataclasses.dataclass
class TableSample:
    t: float
    rows: int
    backlog: int
    bytes: int  # pg_total_relation_size, or the SQLite files


def table_sample(url: str, t: float) -> TableSample:
    counts = state_counts(url)
    rows = sum(counts.values())
    backlog = rows - sum(counts.get(s.value, 0) for s in FINAL)
    if url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///"):])
        size = sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
    else:
        size = int(query(url, "SELECT pg_total_relation_size('conveyor_jobs')")[0][0])
    return TableSample(t, rows, backlog, size)


def autovacuum(url: str) -> bool | None:
    """Whether the PostgreSQL server autovacuums (None on SQLite)."""
    if url.startswith("sqlite:///"):
        return None
    return str(query(url, "SHOW autovacuum")[0][0]) == "on"


def dead_tuples(url: str) -> tuple[int, int] | None:
    """(live, dead) tuples of the jobs table, per the statistics collector."""
    if url.startswith("sqlite:///"):
        return None
    rows = query(url, "SELECT n_live_tup, n_dead_tup FROM pg_stat_user_tables"
                      " WHERE relname = 'conveyor_jobs'")
    return (int(rows[0][0]), int(rows[0][1])) if rows else None


def leader_pid(app: Conveyor) -> int | None:
    row = app.get_leader()
    if row is None:
        return None
    return next((n.pid for n in app.list_nodes() if n.id == row.node_id), None)


def growth_mb(samples: list[tuple[float, int]], start: float) -> tuple[float, float, float] | None:
    """(RSS at warm-up end, peak after it, growth) in MB for one process's samples
    (time since the process started, kB): the warm-up level is the median of the 30 s
    after ``WARMUP``."""
    base = [kb for t, kb in samples if WARMUP <= t - start < WARMUP + 30]
    later = [kb for t, kb in samples if t - start >= WARMUP]
    if not base or not later:
        return None
    warm, peak = statistics.median(base) / 1024, max(later) / 1024
    return round(warm, 1), round(peak, 1), round(peak - warm, 1)


# -- 14 ---------------------------------------------------------------------------------------


@pytest.mark.timeout(int(SECONDS) + 900)
def test_soak(db_url: str, chaos_dir: Path, started: float,
              request: pytest.FixtureRequest) -> None:
    """Scenario 14: mixed load with periodic kill -9 for ``CONVEYOR_SOAK_SECONDS``: no job
    lost, worker memory bounded, throughput steady, the table bounded by the pruner."""
    r = rng(request.node.nodeid)
    args = ("-c", str(SLOTS), "--leader-ttl", str(LEADER_TTL), "--completed-retention",
            str(RETENTION), "--discarded-retention", str(RETENTION), "--log-level", "WARNING")
    rss: dict[int, list[tuple[float, int]]] = collections.defaultdict(list)
    born: dict[int, float] = {}
    tables: list[TableSample] = []
    kills = leader_kills = 0
    load = Load(db_url, request.node.nodeid)
    ctl = Conveyor(db_url)
    auto = autovacuum(db_url)
    vacuum_self = auto is False and os.environ.get("CONVEYOR_SOAK_VACUUM", "1") != "0"
    vacuums = 0
    try:
        with Cluster(db_url, chaos_dir) as cluster, SoakObserver(db_url, RETENTION) as observer:
            t0 = now()
            # The killable workers first, so that the first leader is one of them.
            for _ in range(WORKERS - 1):
                born[cluster.start(*args).pid] = now() - t0
            sentinel = cluster.start(*args)
            born[sentinel.pid] = now() - t0
            load.start()
            next_kill = r.uniform(*KILL_EVERY)
            next_rss = next_table = 0.0
            next_vacuum = VACUUM_EVERY
            while (t := now() - t0) < SECONDS:
                assert load.is_alive(), f"the load stopped: {load.error!r}"
                assert sentinel.poll() is None, cluster.output(sentinel)[-3000:]
                if t >= next_rss:
                    for proc in cluster.alive():
                        if (kb := rss_kb(proc.pid)) is not None:
                            rss[proc.pid].append((t, kb))
                    next_rss += RSS_EVERY
                if t >= next_table:
                    tables.append(table_sample(db_url, t))
                    next_table += TABLE_EVERY
                if vacuum_self and t >= next_vacuum:
                    execute(db_url, "VACUUM conveyor_jobs")
                    vacuums += 1
                    next_vacuum += VACUUM_EVERY
                if t >= next_kill:
                    victims = [p for p in cluster.alive() if p is not sentinel]
                    victim = r.choice(victims)
                    leader_kills += leader_pid(ctl) == victim.pid
                    cluster.kill(victim)
                    kills += 1
                    born[cluster.start(*args).pid] = now() - t0
                    next_kill += r.uniform(*KILL_EVERY)
                time.sleep(0.2)
            load.stop.set()
            load.join(timeout=30)
            assert load.error is None, repr(load.error)
            load_end = now() - t0
            cluster.wait(lambda: all_final(db_url), 180, "the queue to drain after the load")
            drained = now() - t0 - load_end
            tables.append(table_sample(db_url, now() - t0))
        tuples = dead_tuples(db_url)
        rows = {**observer.snapshot, **jobs(db_url)}
    finally:
        load.stop.set()
        ctl.close()

    def expect(job: Job) -> str | None:
        if job.id in load.cancel_targets:
            ok = job.state in (JobState.CANCELLED, JobState.COMPLETED)
            return None if ok else f"expected cancelled or completed, is {job.state.value}"
        return None if job.state == JobState.COMPLETED else f"expected completed, is {job.state.value}"

    outcome = check(db_url, cluster.events(), load.ids, observer, expect, rows=rows)

    # -- throughput per window (completions as first seen by the observer)
    seen = sorted(v[0] - t0 for v in observer.completed.values())
    windows = int(load_end // WINDOW)
    done = collections.Counter(int(t // WINDOW) for t in seen)
    sent = collections.Counter(int((t - t0) // WINDOW) for t in load.enqueued_at)
    per_window = [done.get(w, 0) for w in range(windows)]
    # -- memory
    sentinel_growth = growth_mb(rss[sentinel.pid], born[sentinel.pid])
    others = {pid: g for pid, s in rss.items() if pid != sentinel.pid
              if (g := growth_mb(s, born[pid])) is not None}
    peak_mb = round(max(kb for s in rss.values() for _, kb in s) / 1024, 1)
    # -- table
    steady = [s for s in tables if s.t >= RETENTION + 2 * PRUNE_INTERVAL * 1.1]
    max_rows = max((s.rows for s in tables), default=0)
    sizes = [s.bytes for s in steady] or [s.bytes for s in tables]
    extra: dict[str, Any] = {
        "seconds_of_load": round(load_end), "rate": RATE, "workers": WORKERS, "slots": SLOTS,
        "mix": dict(load.kinds), "cancels_sent": load.cancels, "kills": kills,
        "leader_kills": leader_kills, "drain_seconds": round(drained, 1),
        "window_seconds": WINDOW, "completed_per_window": per_window,
        "enqueued_per_window": [sent.get(w, 0) for w in range(windows)],
        "rss_sentinel_mb": sentinel_growth, "rss_peak_mb": peak_mb,
        "rss_growth_others_max_mb": max((g[2] for g in others.values()), default=None),
        "rss_bound_mb": RSS_BOUND_MB, "warmup_seconds": WARMUP,
        "retention_seconds": RETENTION, "prune_interval_seconds": PRUNE_INTERVAL,
        "rows_max": max_rows, "rows_bound": ROW_BOUND, "rows_final": tables[-1].rows,
        "rows_steady_min": min((s.rows for s in steady), default=None),
        "backlog_max": max(s.backlog for s in tables), "pruned": len(observer.gone),
        "bytes_kind": "sqlite files" if db_url.startswith("sqlite") else
                      "pg_total_relation_size",
        "bytes_steady_first": sizes[0], "bytes_steady_max": max(sizes),
        "bytes_final": tables[-1].bytes,
        "vacuum": (None if auto is None else "autovacuum" if auto else
                   f"autovacuum off on this server; the soak ran VACUUM every {VACUUM_EVERY:g} s "
                   f"({vacuums} times)" if vacuum_self else
                   "autovacuum off on this server and no VACUUM"),
        "live_dead_tuples_end": tuples,
        "table_samples": [(round(s.t), s.rows, s.backlog, s.bytes) for s in tables],
        "rss_samples_sentinel": [(round(t), kb) for t, kb in rss[sentinel.pid]],
    }
    minutes = SECONDS / 60
    result = Result(
        14, "soak: mixed load with periodic kill -9", backend_of(db_url), len(load.ids),
        f"{kills} x SIGKILL every {KILL_EVERY[0]:g}-{KILL_EVERY[1]:g} s ({leader_kills} of "
        f"the leader) over {minutes:g} min of {RATE:g} jobs/s (async, sync, retries, "
        f"snoozes, cancels); retention {RETENTION:g} s"
        + (f"; VACUUM every {VACUUM_EVERY:g} s" if vacuum_self else ""),
        request.node.nodeid, outcome, extra=extra,
        notes="one sentinel worker is never killed so that its memory covers the whole "
              "run; pruned jobs are checked from the observer's last snapshot of them")
    print(f"\nsoak {backend_of(db_url)}: {len(load.ids)} jobs in {load_end:.0f}s, {kills} kills "
          f"({leader_kills} leader); completed per {WINDOW:g}s window {per_window}; sentinel "
          f"RSS (warm, peak, growth) MB {sentinel_growth}; others' max growth "
          f"{extra['rss_growth_others_max_mb']} MB; rows max {max_rows} (bound {ROW_BOUND}), "
          f"pruned {len(observer.gone)}; size {sizes[0]} -> {max(sizes)} -> {tables[-1].bytes}; "
          f"outcome lost {outcome.lost} dup {outcome.duplicates} leases {outcome.leases_lost}")
    finish(result, started)  # records, then fails on any violated invariant
    assert sentinel_growth is not None and sentinel_growth[2] < RSS_BOUND_MB, sentinel_growth
    assert max_rows <= ROW_BOUND, f"{max_rows} rows, over the bound {ROW_BOUND}"
    if SECONDS > RETENTION + 2 * PRUNE_INTERVAL * 1.1:
        assert observer.gone, "the pruner deleted nothing"
    # Steady throughput: every full window completes at least half of what it was fed
    # (a kill costs a few seconds of one worker; the drain after the load catches up).
    fed = RATE * WINDOW
    assert all(n >= 0.5 * fed for n in per_window[1:]), per_window
