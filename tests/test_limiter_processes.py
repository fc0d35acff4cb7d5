"""Limiters across real processes, on both backends: two `conveyor worker` processes and a
plain script share one rate limiter and one concurrency limiter, and a holder is killed
with SIGKILL while it holds a slot.

The checks are sound under load (see tests/test_limiters.py): a grant happened between
its ``asked`` and ``granted`` times, a holder surely held from ``granted`` to
``released`` (to the SIGKILL for the killed one). Every wait is a condition with a
deadline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor
from conveyor.cli._loading import retarget

from ._runtime_util import stop_processes
from .apps import limiters_app
from .conftest import wait_for
from .test_limiters import Span, most_at_once, rate_violations

ROOT = Path(__file__).resolve().parent.parent
APP = "tests.apps.limiters_app:app"


class Procs:
    """Worker and script processes on one database, each cleaned up by its pid."""

    def __init__(self, db_url: str, folder: Path) -> None:
        self.db_url, self.folder = db_url, folder
        self.ledger = folder / "ledger.txt"
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, "CONVEYOR_URL": self.db_url,
               "CONVEYOR_TEST_LEDGER": str(self.ledger),
               "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
        log = open(self.folder / f"proc-{len(self.procs)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen([sys.executable, *args], env=env, cwd=ROOT, stdout=log,
                                stderr=subprocess.STDOUT)
        log.close()
        self.procs.append(proc)
        return proc

    def worker(self) -> subprocess.Popen[bytes]:
        return self.start("-m", "conveyor", "worker", APP, "--queues", "default:4",
                          "--heartbeat-interval", "0.3", "--shutdown-timeout", "3",
                          "--log-level", "warning")

    def script(self, *args: str) -> subprocess.Popen[bytes]:
        return self.start("-m", "tests.apps.limiters_app", *args)

    def lines(self, kind: str) -> list[list[str]]:
        if not self.ledger.exists():
            return []
        return [line.split() for line in self.ledger.read_text().splitlines()
                if line.startswith(kind + " ")]

    def output(self) -> str:
        return "\n".join(f"--- {i} (pid {p.pid}, exit {p.poll()}) ---\n"
                         + (self.folder / f"proc-{i}.log").read_text(errors="replace")
                         for i, p in enumerate(self.procs))

    def stop_all(self) -> None:
        stop_processes(self.procs, 15)


@pytest.fixture
def procs(db_url: str, tmp_path: Path) -> Iterator[Procs]:
    p = Procs(db_url, tmp_path)
    try:
        yield p
    finally:
        p.stop_all()


@pytest.fixture
def lapp(db_url: str) -> Iterator[Conveyor]:
    """The workers' app (its tasks and limiters) on this test's database."""
    app = retarget(limiters_app.app, db_url)
    try:
        yield app
    finally:
        app.close()


def test_two_workers_and_a_script_stay_under_the_rate(procs: Procs, lapp: Conveyor) -> None:
    """30 starts of "slack" (10/s) from two workers' jobs and a plain script."""
    workers = [procs.worker(), procs.worker()]
    lapp.enqueue_many([lapp.tasks[limiters_app.post.name].job(n) for n in range(20)])
    script = procs.script("rate", "10")

    def done() -> bool:
        assert all(w.poll() is None for w in workers), procs.output()
        return len(procs.lines("rate")) >= 30

    wait_for(done, timeout=180, interval=0.1, message="30 starts")
    assert script.wait(timeout=60) == 0, procs.output()
    lines = procs.lines("rate")
    spans = [(float(line[1]), float(line[2])) for line in lines]
    pids = {line[4] for line in lines}
    print(f"\n30 starts of 10/s over {max(g for _, g in spans) - min(a for a, _ in spans):.2f}s "
          f"from {len(pids)} processes")
    assert len(pids) >= 2  # the script and at least one worker (often both)
    assert script.pid in {int(p) for p in pids}
    assert rate_violations(spans, 10) == []


def test_never_more_holders_than_the_limit_across_a_kill_9(procs: Procs,
                                                           lapp: Conveyor) -> None:
    """A script holds one of "ocr"'s 2 slots; two workers' jobs share the rest; the
    script is killed with SIGKILL while holding; its slot frees when its lease (2 s)
    runs out, and the jobs then use both slots. Never more than 2 holders."""
    holder = procs.script("hold")
    wait_for(lambda: procs.lines("held"), timeout=60, message="the script to hold a slot")
    (held,) = procs.lines("held")
    workers = [procs.worker(), procs.worker()]
    lapp.enqueue_many([lapp.tasks[limiters_app.scan.name].job(n) for n in range(16)])
    wait_for(lambda: len(procs.lines("slot")) >= 3, timeout=120, interval=0.05,
             message="jobs to run beside the held slot")
    # The script's renewals kept its slot past its lease of 2 s meanwhile.
    assert held[5] in {h.holder for r in lapp.list_limiters() for h in r.holders}
    killed_at = time.time()
    os.kill(holder.pid, signal.SIGKILL)
    assert holder.wait(timeout=30) == -signal.SIGKILL

    def freed() -> bool:
        holders = {h.holder for r in lapp.list_limiters() for h in r.holders}
        return held[5] not in holders
    wait_for(freed, timeout=30, interval=0.05, message="the dead holder's lease to run out")
    freed_after = time.time() - killed_at
    ids = [job.id for job in lapp.list_jobs(task=limiters_app.scan.name, limit=100)]

    def finished() -> bool:
        assert all(w.poll() is None for w in workers), procs.output()
        return all(lapp.get_job(i).state.value == "completed" for i in ids)  # type: ignore[union-attr]
    wait_for(finished, timeout=240, interval=0.2, message="every scan to complete")
    slots = procs.lines("slot")
    spans: list[Span] = [(float(s[2]), float(s[3])) for s in slots]
    spans.append((float(held[2]), killed_at))
    after = [s for s in spans[:-1] if s[0] > killed_at + freed_after]
    print(f"\n{len(slots)} holds by jobs; the killed holder's slot freed "
          f"{freed_after:.2f}s after SIGKILL; most at once {most_at_once(spans)}, "
          f"after the kill {most_at_once(after)}")
    assert len(slots) == 16
    assert most_at_once(spans) <= 2
    assert all(r.holders == () for r in lapp.list_limiters())
