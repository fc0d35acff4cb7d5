"""Scenario 18: a concurrency limiter's holders killed with kill -9 (both backends)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conveyor import Conveyor

from ..test_limiters import most_at_once
from . import limiter_app
from .harness import Cluster, Observer, Result, all_final, check, enqueue, now, pick, rng
from .test_processes import backend_of, completed, finish

APP = "tests.chaos.limiter_app:app"


def holder_spans(path: Path, killed: dict[int, float]) -> list[tuple[float, float]]:
    """What each holder surely held: from its grant to its release, or to the SIGKILL
    of its process (its slot was held at least that long: its lease outlives it)."""
    granted: dict[str, float] = {}
    spans = []
    for line in path.read_text().splitlines() if path.exists() else []:
        event, _, _, _pid, ns, holder = line.split()
        if event == "granted":
            granted[holder] = int(ns) / 1e9
        else:
            spans.append((granted.pop(holder), int(ns) / 1e9))
    for holder, start in granted.items():  # never released: its process was killed
        holder_pid = int(holder.split(":")[1])
        assert holder_pid in killed, f"holder {holder} neither released nor killed"
        spans.append((start, killed[holder_pid]))
    return spans


def live_holders(app: Conveyor) -> set[str]:
    return {h.holder for row in app.list_limiters() for h in row.holders}


def test_concurrency_limiter_holders_killed(db_url: str, chaos_dir: Path, started: float,
                                            request: pytest.FixtureRequest) -> None:
    """Three workers run jobs that each hold one of 3 slots; a worker that holds one is
    killed with SIGKILL, again and again, and a fresh one started. Never more than 3
    holders; every dead holder's slot frees once its 2 s lease runs out; every job
    completes (its killed attempt rescued and run again)."""
    n, kills, workers = pick(30, 150), pick(3, 10), 3
    r = rng(request.node.nodeid)
    ids = enqueue(db_url, [limiter_app.scan.job(r.uniform(0.1, 0.4)) for _ in range(n)])
    killed: dict[int, float] = {}
    freed: list[float] = []
    ledger = chaos_dir / "ledger.txt.holds"
    watcher = Conveyor(db_url)
    try:
        with Cluster(db_url, chaos_dir, app=APP, env={"CONVEYOR_CHAOS_URL": db_url}) as cluster, \
                Observer(db_url) as observer:
            for _ in range(workers):
                cluster.start("-c", "2")
            for _ in range(kills):
                def holding() -> list[str]:
                    text = ledger.read_text() if ledger.exists() else ""
                    held = {line.split()[5] for line in text.splitlines()
                            if line.startswith("granted")}
                    held -= {line.split()[5] for line in text.splitlines()
                             if line.startswith("released")}
                    alive = {p.pid for p in cluster.alive()}
                    return [h for h in held if int(h.split(":")[1]) in alive]
                if all_final(db_url):
                    break
                victims = cluster.wait(holding, 60, "a worker to hold a slot")
                victim = r.choice(victims)
                pid = int(victim.split(":")[1])
                proc = next(p for p in cluster.alive() if p.pid == pid)
                cluster.kill(proc)
                killed[pid] = now()
                cluster.wait(lambda v=victim: v not in live_holders(watcher), 30,  # type: ignore[misc]
                             "the killed holder's lease to run out")
                freed.append(now() - killed[pid])
                cluster.start("-c", "2")
            cluster.wait(lambda: all_final(db_url), pick(180, 900), "every job to finish")
    finally:
        watcher.close()
    outcome = check(db_url, cluster.events(), ids, observer, completed)
    spans = holder_spans(ledger, killed)
    most = most_at_once(spans)
    if most > limiter_app.CONCURRENCY:
        outcome.violations.append(f"{most} holders at once, over the limit of 3")
    reader = Conveyor(db_url)
    try:
        left = live_holders(reader)
    finally:
        reader.close()
    if left:
        outcome.violations.append(f"slots still held after every job finished: {left}")
    assert len(killed) == kills or all_final(db_url)
    finish(Result(18, "Concurrency limiter: holders killed with kill -9", backend_of(db_url), n,
                  f"{len(killed)} x SIGKILL of a worker holding a slot (limit 3, lease 2 s), "
                  f"{workers} workers x 2 slots", request.node.nodeid, outcome,
                  notes=f"most holders at once {most} of 3; a dead holder's slot freed "
                        f"{min(freed, default=0):.1f}-{max(freed, default=0):.1f} s after "
                        "its SIGKILL",
                  extra={"most_holders": most, "kills": len(killed),
                         "freed_after_s": [round(f, 2) for f in freed],
                         "holds": len(spans)}), started)
