"""The chaos harness: real worker processes, a ledger, a database observer, the
invariant checker, and the results the report is rendered from.

A scenario is an ordinary pytest test::

    def test_x(db_url, chaos_dir):
        with Cluster(db_url, chaos_dir) as cluster, Observer(db_url) as observer:
            ids = enqueue(db_url, [app.work.job(0.01) for _ in range(100)])
            cluster.start("-c", "10")
            ...faults...
            wait_until(lambda: all_final(db_url), 60, "every job final")
        outcome = check(db_url, cluster, observer, ids)
        record(Result(...), outcome)

``Cluster`` kills every process it started, by pid, when the block ends; every wait
has a deadline.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import psycopg

from conveyor import Conveyor, Job, JobSpec, JobState

from .. import _evidence

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
MODE = "long" if os.environ.get("CONVEYOR_CHAOS", "").strip().lower() == "long" else "quick"
LONG = MODE == "long"
#: Where each scenario writes its result as JSON (``make chaos`` sets it).
RESULTS_ENV = "CONVEYOR_CHAOS_RESULTS"
APP = "tests.chaos.app:app"
FINAL = frozenset({JobState.COMPLETED, JobState.CANCELLED, JobState.DISCARDED})
LEASE_EXPIRED = "lease expired"


def pick(quick: T, long: T) -> T:
    """The quick-mode value, or the long-mode one under ``CONVEYOR_CHAOS=long``."""
    return long if LONG else quick


def rng(name: str) -> random.Random:
    """A seeded generator per scenario: the same "random" moments on every run."""
    return random.Random(f"{name}:{os.environ.get('CONVEYOR_CHAOS_SEED', '0')}")


def wait_until(check: Callable[[], T], timeout: float, what: str, interval: float = 0.02) -> T:
    """Poll ``check`` until truthy; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


# -- the ledger ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    kind: str  # start | end | fail | abort | snooze
    job: int
    attempt: int
    pid: int
    t: float  # CLOCK_MONOTONIC seconds


def read_ledger(path: Path) -> list[Event]:
    if not path.exists():
        return []
    events = []
    for line in path.read_text().splitlines():
        kind, job, attempt, pid, ns = line.split()
        events.append(Event(kind, int(job), int(attempt), int(pid), int(ns) / 1e9))
    return events


def now() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


# -- worker processes ----------------------------------------------------------------------


class Cluster:
    """Worker processes on one database; every one is killed by pid on exit."""

    def __init__(self, url: str, workdir: Path, app: str = APP,
                 env: dict[str, str] | None = None) -> None:
        self.url, self.workdir, self.app = url, workdir, app
        self.ledger = workdir / "ledger.txt"
        self.env = env or {}
        self.procs: list[subprocess.Popen[bytes]] = []
        self.kills = 0

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop_all()

    def start(self, *args: str, env: dict[str, str] | None = None, app: str | None = None,
              lease_ttl: float = 1.5, heartbeat: float = 0.25) -> subprocess.Popen[bytes]:
        environ = {**os.environ, **self.env, **(env or {}),
                   "CONVEYOR_CHAOS_LEDGER": str(self.ledger),
                   "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
        environ.pop("CONVEYOR_URL", None)
        cmd = [sys.executable, "-m", "conveyor", "worker", app or self.app, "--url", self.url,
               "--lease-ttl", str(lease_ttl), "--heartbeat-interval", str(heartbeat),
               "--log-level", "INFO", *args]
        with open(self.log_path(len(self.procs)), "wb") as log:
            proc = subprocess.Popen(cmd, env=environ, cwd=self.workdir, stdout=log,
                                    stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def log_path(self, index: int) -> Path:
        return self.workdir / f"worker-{index}.log"

    def output(self, proc: subprocess.Popen[bytes]) -> str:
        return self.log_path(self.procs.index(proc)).read_text(errors="replace")

    def all_output(self) -> str:
        return "\n".join(self.output(p) for p in self.procs)

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is None]

    def events(self) -> list[Event]:
        return read_ledger(self.ledger)

    def wait(self, check: Callable[[], T], timeout: float, what: str) -> T:
        """``wait_until``, failing with the tail of every worker's log."""
        try:
            return wait_until(check, timeout, what)
        except AssertionError as exc:
            tails = [f"--- worker {i} (pid {p.pid}, exit {p.poll()}):\n"
                     + "\n".join(self.log_path(i).read_text(errors="replace").splitlines()[-8:])
                     for i, p in enumerate(self.procs)]
            raise AssertionError(f"{exc}\n" + "\n".join(tails)) from None

    def ran_any(self, pid: int, job: int | None = None, kind: str = "start") -> bool:
        """Whether process ``pid`` logged ``kind`` (for ``job``, if given)."""
        return any(e.pid == pid and e.kind == kind and job in (None, e.job) for e in self.events())

    def logged(self, proc: subprocess.Popen[bytes], text: str) -> bool:
        return text in self.output(proc)

    def kill(self, proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
        if proc.poll() is None:
            os.kill(proc.pid, sig)
            if sig == signal.SIGKILL:
                self.kills += 1
                proc.wait(timeout=10)

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.kill(proc.pid, signal.SIGCONT)
                    os.kill(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):  # a zombie we cannot reap
                proc.wait(timeout=10)


# -- the database, read directly -------------------------------------------------------------


def query(url: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """One read on a fresh connection (SQLite ``?`` / Postgres ``%s`` placeholders)."""
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(url[len("sqlite:///"):], timeout=30)
        try:
            return conn.execute(sql.replace("%s", "?"), params).fetchall()
        finally:
            conn.close()
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as pg:
        return pg.execute(sql, params).fetchall()


def execute(url: str, sql: str, params: Sequence[Any] = ()) -> None:
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(url[len("sqlite:///"):], timeout=30, isolation_level=None)
        try:
            conn.execute(sql.replace("%s", "?"), params)
        finally:
            conn.close()
        return
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as pg:
        pg.execute(sql, params)


def state_counts(url: str) -> dict[str, int]:
    return {str(s): int(n) for s, n in query(
        url, "SELECT state, count(*) FROM conveyor_jobs_all GROUP BY state")}


def all_final(url: str, expected: int | None = None) -> bool:
    counts = state_counts(url)
    total = sum(counts.values())
    done = sum(counts.get(s.value, 0) for s in FINAL)
    return done == total and (expected is None or total == expected)


def enqueue(url: str, specs: Sequence[JobSpec], batch: int = 2000) -> list[int]:
    """Enqueue through the public API (the specs' tasks are re-bound to ``url``)."""
    app = Conveyor(url)
    try:
        ids: list[int] = []
        for start in range(0, len(specs), batch):
            ids += [j.id for j in app.enqueue_many(rebind(app, specs[start:start + batch]))]
        return ids
    finally:
        app.close()


def rebind(app: Conveyor, specs: Sequence[JobSpec]) -> list[JobSpec]:
    """The specs with their tasks registered on (and bound to) ``app``."""
    return [dataclasses.replace(s, task=_rebind(app, s)) for s in specs]


def _rebind(app: Conveyor, spec: JobSpec) -> Any:
    task = spec.task
    if task.name not in app.tasks:
        d = task.defaults
        app.task(name=d.name, queue=d.queue, priority=d.priority, max_attempts=d.max_attempts,
                 timeout=d.timeout, backoff=d.backoff, tags=d.tags)(task.fn)
    return app.tasks[task.name]


def jobs(url: str) -> dict[int, Job]:
    """Every job row, by id."""
    app = Conveyor(url)
    try:
        out: dict[int, Job] = {}
        before: int | None = None
        while True:
            page = app.list_jobs(limit=10_000, before_id=before)
            out.update((j.id, j) for j in page)
            if len(page) < 10_000:
                return out
            before = page[-1].id
    finally:
        app.close()


class Observer:
    """Watches the database while a scenario runs: a completed job must stay completed,
    with the same attempt and result, and no execution may start after it completed.

    A poll may fail (a busy SQLite file, a dropped connection): the failures are counted
    and reported in the scenario's result, and more than ``max_errors`` of them, or no
    successful poll while the scenario ran, fail it (an observer that cannot see proves
    nothing). Polls failing inside ``with observer.outage():`` (the scenario takes the
    database down on purpose) are counted apart and not bounded."""

    def __init__(self, url: str, interval: float = 0.15, max_errors: int = 3) -> None:
        self.url, self.interval, self.max_errors = url, interval, max_errors
        #: id -> (monotonic time first seen completed, attempt, result text)
        self.completed: dict[int, tuple[float, int, str]] = {}
        self.violations: list[str] = []
        #: Successful polls (the last look at exit included).
        self.polls = 0
        #: Polls of the background thread: tried, and failed outside / inside an outage.
        self.attempts = 0
        self.errors = 0
        self.outage_errors = 0
        #: The first few unexpected errors, one line each.
        self.error_samples: list[str] = []
        self._outages = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-observer", daemon=True)

    def __enter__(self) -> Observer:
        self._thread.start()
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        if et is None:
            self.poll()  # one last look once everything stopped

    @contextlib.contextmanager
    def outage(self) -> Iterator[None]:
        """The database is down on purpose meanwhile: failed polls are expected."""
        self._outages += 1
        try:
            yield
        finally:
            self._outages -= 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            in_outage = self._outages > 0
            self.attempts += 1
            try:
                self.poll()
            except Exception as exc:  # counted, reported, and bounded by problems()
                if in_outage or self._outages > 0:
                    self.outage_errors += 1
                    continue
                self.errors += 1
                if len(self.error_samples) < 5:
                    self.error_samples.append(" ".join(f"{type(exc).__name__}: {exc}".split()))

    def problems(self) -> list[str]:
        """What makes this observer's silence meaningless: too many failed polls, or none
        that succeeded while the scenario ran."""
        out = []
        succeeded = self.attempts - self.errors - self.outage_errors
        if self.attempts and succeeded <= 0:
            out.append(f"the observer never read the table while the scenario ran: all "
                       f"{self.attempts} polls failed ({'; '.join(self.error_samples) or 'outage'})")
        if self.errors > self.max_errors:
            out.append(f"{self.errors} of {self.attempts} observer polls failed (at most "
                       f"{self.max_errors} may): {'; '.join(self.error_samples)}")
        return out

    def poll(self) -> None:
        rows = query(self.url, "SELECT id, state, attempt, result FROM conveyor_jobs_all"
                               " WHERE state = 'completed'")
        seen_at = now()  # after the read: each of these completed before this moment
        current = {int(r[0]): (str(r[1]), int(r[2]), _text(r[3])) for r in rows}
        for job_id in [i for i in self.completed if i not in current]:
            for r in query(self.url, "SELECT id, state, attempt, result FROM conveyor_jobs_all"
                                     " WHERE id = %s", [job_id]):
                current[job_id] = (str(r[1]), int(r[2]), _text(r[3]))
        for job_id, (_, attempt, result) in list(self.completed.items()):
            state, att, res = current.get(job_id, ("(not final)", -1, ""))
            if state != "completed" or att != attempt or res != result:
                self.violations.append(
                    f"job {job_id} was completed (attempt {attempt}) and then became "
                    f"{state} (attempt {att})")
                del self.completed[job_id]
        for job_id, (state, attempt, result) in current.items():
            if state == "completed" and job_id not in self.completed:
                self.completed[job_id] = (seen_at, attempt, result)
        self.polls += 1


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


# -- the invariants --------------------------------------------------------------------------


@dataclasses.dataclass
class Outcome:
    """What the checker found; ``violations`` must be empty."""

    jobs: int = 0
    states: dict[str, int] = dataclasses.field(default_factory=dict)
    executions: int = 0
    #: Executions whose lease was lost (their attempt was rescued): the work ran again.
    duplicates: int = 0
    #: Of those, executions that ran to the end before their lease was found lost.
    duplicate_completions: int = 0
    #: Leases the database declared lost (rescues), per job error history.
    leases_lost: int = 0
    #: Attempts given back without being used (graceful shutdown, Snooze).
    given_back: int = 0
    lost: int = 0
    #: The observer's polls: tried, failed (bounded), failed during a planned outage.
    observer_polls: int = 0
    observer_errors: int = 0
    observer_outage_errors: int = 0
    violations: list[str] = dataclasses.field(default_factory=list)

    def assert_ok(self) -> None:
        assert not self.violations, "invariants violated:\n" + "\n".join(self.violations[:40])


def check(
    url: str,
    events: Iterable[Event],
    enqueued: Iterable[int],
    observer: Observer | None = None,
    expect: Callable[[Job], str | None] | None = None,
    rows: Mapping[int, Job] | None = None,
) -> Outcome:
    """Check every invariant of the delivery promise after a scenario.

    1. every enqueued job exists and is final (``expect`` may demand more per job);
    2. nothing was lost: a completed job's final attempt ran and returned;
    3. executions per job <= its attempts: an attempt number runs once, unless an
       earlier run of it was given back (interrupted by shutdown, or snoozed);
    4. completed never changes: the observer saw no completed job change, and no
       execution started after the job was seen completed;
    5. duplicates only where a lease was lost: every run of an attempt other than the
       last is explained by its own recorded failure, a give-back, or a rescue (a
       "lease expired" entry for that attempt); runs of rescued attempts are counted.

    ``rows`` replaces the table read at the end (the soak passes the last snapshot of
    jobs the pruner has deleted since, merged with the table).
    """
    out = Outcome()
    rows = jobs(url) if rows is None else rows
    wanted = list(enqueued)
    out.jobs = len(wanted)
    out.states = dict(collections.Counter(rows[i].state.value for i in wanted if i in rows))
    by_job: dict[int, list[Event]] = collections.defaultdict(list)
    for ev in events:
        by_job[ev.job].append(ev)
    v = out.violations
    for job_id in wanted:
        job = rows.get(job_id)
        if job is None:
            out.lost += 1
            v.append(f"job {job_id} was enqueued and is gone")
            continue
        if job.state not in FINAL:
            out.lost += 1
            v.append(f"job {job_id} is {job.state.value}, not final (attempt {job.attempt})")
            continue
        if expect is not None and (problem := expect(job)):
            v.append(f"job {job_id}: {problem}")
        evs = sorted(by_job.get(job_id, []), key=lambda e: e.t)
        rescued = [e.get("attempt") for e in job.errors if LEASE_EXPIRED in str(e.get("error", ""))]
        failed = {e.get("attempt") for e in job.errors if LEASE_EXPIRED not in str(e.get("error", ""))}
        out.leases_lost += len(rescued)
        starts = [e for e in evs if e.kind == "start"]
        out.executions += len(starts)
        if job.state == JobState.COMPLETED:
            finished = [e for e in evs if e.kind == "end" and e.attempt == job.attempt]
            if not finished:
                out.lost += 1
                v.append(f"job {job_id} is completed but its attempt {job.attempt} never returned")
        ended = {(e.attempt, e.pid, e.kind) for e in evs if e.kind != "start"}
        for start in starts:
            given_back = {(start.attempt, start.pid, "abort"), (start.attempt, start.pid, "snooze")}
            if start.attempt < 1 or (start.attempt > job.attempt and not given_back & ended):
                v.append(f"job {job_id} ran attempt {start.attempt} but the row says {job.attempt}")
        per_attempt: dict[int, list[Event]] = collections.defaultdict(list)
        for start in starts:
            per_attempt[start.attempt].append(start)
        for attempt, runs in per_attempt.items():
            for earlier in runs[:-1]:
                if (attempt, earlier.pid, "abort") in ended or (attempt, earlier.pid, "snooze") in ended:
                    out.given_back += 1
                else:
                    v.append(f"job {job_id} attempt {attempt} ran twice (pids "
                             f"{[r.pid for r in runs]}) and was not given back in between")
            if attempt in rescued:
                # The last run of a rescued attempt is the one whose lease was lost; any
                # earlier run of the same number was given back (the number was reused).
                out.duplicates += 1
                out.duplicate_completions += (attempt, runs[-1].pid, "end") in ended
            elif attempt != job.attempt and attempt not in failed:
                last = runs[-1]
                if not {(attempt, last.pid, "abort"), (attempt, last.pid, "snooze")} & ended:
                    v.append(f"job {job_id} attempt {attempt} ran (pid {last.pid}) and was "
                             "neither failed, given back nor rescued, yet the job moved on")
        if observer is not None and job_id in observer.completed:
            seen = observer.completed[job_id][0]
            late = [s for s in starts if s.t > seen]
            if late:
                v.append(f"job {job_id} started again (attempt {late[0].attempt}, pid "
                         f"{late[0].pid}) {late[0].t - seen:.3f}s after it was seen completed")
    if observer is not None:
        v += observer.violations
        v += observer.problems()
        out.observer_polls = observer.attempts
        out.observer_errors = observer.errors
        out.observer_outage_errors = observer.outage_errors
    return out


# -- results ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Result:
    """One row of docs/reliability.md."""

    scenario: int
    title: str
    backend: str
    jobs: int
    faults: str
    test: str
    outcome: Outcome | None = None
    notes: str = ""
    seconds: float = 0.0
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        o = self.outcome or Outcome()
        return {
            "scenario": self.scenario, "title": self.title, "backend": self.backend,
            "mode": MODE, "jobs": self.jobs, "faults": self.faults,
            "lost": o.lost, "duplicates": o.duplicates,
            "duplicate_completions": o.duplicate_completions, "leases_lost": o.leases_lost,
            "given_back": o.given_back, "executions": o.executions, "states": o.states,
            "violations": len(o.violations), "notes": self.notes,
            "observer": {"polls": o.observer_polls, "errors": o.observer_errors,
                         "outage_errors": o.observer_outage_errors},
            "seconds": round(self.seconds, 1), "extra": self.extra,
            "command": f"CONVEYOR_CHAOS=long .venv/bin/pytest '{self.test}'",
        }


def record(result: Result) -> None:
    """Write the result for the report when ``$CONVEYOR_CHAOS_RESULTS`` is set."""
    target = os.environ.get(RESULTS_ENV)
    if not target:
        return
    folder = Path(target)
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{result.scenario:02d}-{result.backend}-{result.test.rsplit('::', 1)[-1]}"
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    # the commit and the state of the measured code when the scenario ran, not when the
    # page is rendered (docs/reliability.md shows both per row)
    doc = {**result.to_json(), **_evidence.stamp(_evidence.CHAOS_MEASURED)}
    (folder / f"{safe}.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
