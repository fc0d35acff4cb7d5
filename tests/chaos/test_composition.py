"""Scenarios 15-17: workflows and batches under faults, on real worker processes.

The fan-in and batch callbacks are settled by database triggers in the transaction of
the write that finishes a job (docs/workflows.md, "How it works"). These scenarios check
the promise from the outside: a worker killed while a fan-out runs, the last two
dependencies of a fan-in finishing at the same moment on two processes, and a batch whose
last job fails and is retried: every callback runs exactly once, nothing is lost.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import statistics
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from conveyor import Batch, Conveyor, Job, JobSpec, JobState, chord, group
from conveyor._storage import (
    JobAck,
    JobAckManyParams,
    JobFetchAvailableParams,
    Storage,
    WakeHub,
    create_storage,
)

from . import app as chaos
from .harness import (
    Cluster,
    Event,
    Observer,
    Result,
    all_final,
    check,
    jobs,
    pick,
    query,
    rebind,
    rng,
)
from .test_processes import backend_of, completed, finish

#: (header job ids, callback job id) of one fan-in.
FanIn = tuple[list[int], int]
#: Queues of scenario 16's storage-level races (no worker serves them).
RACE_QUEUE, RACE_CALLBACKS = "composition-race", "composition-race-callbacks"


def enqueue_fan_ins(url: str, shapes: Sequence[tuple[Sequence[JobSpec], JobSpec]]) -> list[FanIn]:
    """Each (header, callback) as one ``chord`` workflow, through the public API."""
    app = Conveyor(url)
    try:
        out: list[FanIn] = []
        for header, callback in shapes:
            specs = rebind(app, [*header, callback])
            run = app.enqueue_workflow(chord(group(*specs[:-1]), specs[-1]))
            ids = [j.id for j in run.jobs]
            out.append((ids[:-1], ids[-1]))
        return out
    finally:
        app.close()


def enqueue_batch(url: str, specs: Sequence[JobSpec], tag: str) -> Batch:
    """One batch with all three callbacks (``gather`` jobs tagged with ``tag``)."""
    app = Conveyor(url)
    try:
        success, complete, discard = rebind(app, [chaos.gather.job(tag=f"{tag} success"),
                                                  chaos.gather.job(tag=f"{tag} complete"),
                                                  chaos.gather.job(tag=f"{tag} discard")])
        return app.batch(rebind(app, specs), on_success=success, on_complete=complete,
                         on_discard=discard)
    finally:
        app.close()


def get_batch(url: str, batch_id: int) -> Batch:
    app = Conveyor(url)
    try:
        batch = app.get_batch(batch_id)
        assert batch is not None, f"batch {batch_id} is gone"
        return batch
    finally:
        app.close()


def _at_least(url: str, ids: Sequence[int], n: int) -> bool:
    return count_in(url, ids, "completed") >= n


def count_in(url: str, ids: Sequence[int], state: str) -> int:
    """How many of ``ids`` are in ``state`` (the scenarios' tables are small)."""
    found = {int(r[0]) for r in query(url, "SELECT id FROM conveyor_jobs_all WHERE state = %s", [state])}
    return len(found.intersection(ids))


def starts(events: Sequence[Event]) -> collections.Counter[int]:
    return collections.Counter(e.job for e in events if e.kind == "start")


def check_callback(cb: Job | None, events: Sequence[Event], want_result: int,
                   what: str) -> list[str]:
    """A callback released once that completed. Its last attempt ran exactly once, to its
    end; an earlier attempt is allowed only when a kill took it (claimed or running, then
    rescued after the lease expired): at-least-once delivery, never a second release."""
    if cb is None:
        return [f"{what}: the callback row is gone"]
    out = []
    if cb.state != JobState.COMPLETED:
        out.append(f"{what}: callback job {cb.id} is {cb.state.value}, attempt {cb.attempt}")
    last = [e.kind for e in events if e.job == cb.id and e.attempt == cb.attempt]
    if last != ["start", "end"]:
        out.append(f"{what}: callback job {cb.id}'s attempt {cb.attempt} logged {last}")
    other = [e for e in cb.errors if "lease expired" not in str(e.get("error", ""))]
    if cb.attempt != 1 + len(cb.errors) or other:
        out.append(f"{what}: callback job {cb.id} is at attempt {cb.attempt} with errors "
                   f"{cb.errors} (only rescues of a killed worker's attempt may precede it)")
    if cb.result != want_result:
        out.append(f"{what}: callback job {cb.id} was handed {cb.result} results, not {want_result}")
    return out


def ran_after(events: Sequence[Event], header: Sequence[int], cb: int) -> bool:
    """Whether the callback started after every header job's last run ended."""
    ends = [e.t for e in events if e.job in set(header) and e.kind == "end"]
    first = min((e.t for e in events if e.job == cb and e.kind == "start"), default=None)
    return first is not None and bool(ends) and first > max(ends)


# -- 15 -------------------------------------------------------------------------------------


def test_composition_kill_9_during_fan_in(db_url: str, chaos_dir: Path, started: float,
                                          request: pytest.FixtureRequest) -> None:
    """Scenario 15: fan-outs run on two workers; a worker is killed (SIGKILL) while their
    jobs run, again and again, and replaced. Every job ends completed, and each fan-in
    callback runs exactly once, after its whole group, with every result."""
    fans, width, kills = pick(4, 10), pick(60, 300), pick(2, 6)
    r = rng("composition-kill")
    with Cluster(db_url, chaos_dir) as cluster, Observer(db_url) as observer:
        planned = enqueue_fan_ins(db_url, [
            ([chaos.work.job(r.uniform(0.02, 0.1)) for _ in range(width)],
             chaos.gather.job(tag=f"fan-in {i}")) for i in range(fans)])
        header_ids = [i for header, _ in planned for i in header]
        callbacks = [cb for _, cb in planned]
        ids = [*header_ids, *callbacks]
        for _ in range(2):
            cluster.start("-c", "8")
        pending_at_kills: list[int] = []
        for k in range(kills):
            threshold = len(header_ids) * (k + 1) // (kills + 2)
            cluster.wait(functools.partial(_at_least, db_url, header_ids, threshold),
                         pick(60, 240), f"{threshold} jobs of the fan-outs completed")
            pending_at_kills.append(count_in(db_url, callbacks, "pending"))
            cluster.kill(r.choice(cluster.alive()))
            cluster.start("-c", "8")
        cluster.wait(lambda: all_final(db_url, len(ids)), pick(120, 600), "every job final")
    events = cluster.events()
    outcome = check(db_url, events, ids, observer, expect=completed)
    rows, runs = jobs(db_url), starts(events)
    for i, (header, cb) in enumerate(planned):
        outcome.violations += check_callback(rows.get(cb), events, width, f"fan-in {i}")
        if not ran_after(events, header, cb):
            outcome.violations.append(f"fan-in {i}: the callback started before its group ended")
    if not all(pending_at_kills):
        outcome.violations.append(f"a kill landed after every fan-in was released: callbacks "
                                  f"pending at each kill {pending_at_kills} (of {fans})")
    if outcome.leases_lost == 0:
        outcome.violations.append("no kill interrupted a running job: nothing was tested")
    callback_runs = sum(runs[cb] for cb in callbacks)
    finish(Result(15, "kill -9 during fan-in (chords)", backend_of(db_url), len(ids),
                  f"{kills} x SIGKILL of one of 2 workers while {fans} fan-outs of {width} ran",
                  request.node.nodeid, outcome,
                  notes=f"{callback_runs} callback runs for {fans} fan-ins (each released "
                        "once, after the whole group, with every result; a second run only "
                        "where a kill cut the first)",
                  extra={"fan_ins": fans, "width": width, "kills": kills,
                         "callbacks": fans, "callback_runs": callback_runs,
                         "callbacks_pending_at_kills": pending_at_kills}), started)


# -- 16 -------------------------------------------------------------------------------------


def test_composition_last_two_dependencies_finish_together(
        db_url: str, chaos_dir: Path, started: float, request: pytest.FixtureRequest) -> None:
    """Scenario 16: the last two dependencies of a fan-in run on two worker processes,
    both wait on one barrier file and finish within a millisecond or so of each other, so
    their completions race to release the callback. Repeated; the callback is released
    and runs exactly once every time."""
    rounds = pick(10, 100)
    ids: list[int] = []
    planned: list[FanIn] = []
    gaps_ms: list[float] = []
    with Cluster(db_url, chaos_dir) as cluster, Observer(db_url) as observer:
        cluster.start("-c", "1")
        cluster.start("-c", "1")
        for n in range(rounds):
            fan_in, gap = _barrier_round(cluster, db_url, chaos_dir, n)
            planned.append(fan_in)
            ids += [*fan_in[0], fan_in[1]]
            gaps_ms.append(gap)
    races = pick(200, 2000)
    raced = enqueue_fan_ins(db_url, [([_in_queue(chaos.echo.job(i), RACE_QUEUE) for i in range(2)],
                                      _in_queue(chaos.gather.job(tag="race"), RACE_CALLBACKS))
                                     for _ in range(races)])
    race_violations: list[str] = []
    released_once = asyncio.run(race_releases(db_url, raced, race_violations))
    events = cluster.events()
    outcome = check(db_url, events, ids, observer, expect=completed)
    outcome.violations += race_violations
    rows, runs = jobs(db_url), starts(events)
    for n, (header, cb) in enumerate(planned):
        outcome.violations += check_callback(rows.get(cb), events, 4, f"round {n}")
        if not ran_after(events, header, cb):
            outcome.violations.append(f"round {n}: the callback started before its group ended")
    callback_runs = sum(runs[cb] for _, cb in planned)
    median = statistics.median(gaps_ms)
    finish(Result(16, "last two dependencies of a fan-in finish together", backend_of(db_url),
                  len(ids) + 3 * races, f"{rounds} rounds: the last 2 of 4 dependencies "
                  "released by one barrier on 2 worker processes; then "
                  f"{races} fan-ins whose 2 dependencies are acked at once on 2 connections",
                  request.node.nodeid, outcome,
                  notes=f"{callback_runs} callback runs for {rounds} fan-ins on workers, the two "
                        f"last completions {median:.1f} ms apart (median of finished_at; at "
                        f"most {max(gaps_ms):.1f} ms); {released_once} of {races} racing "
                        "fan-ins released exactly once",
                  extra={"rounds": rounds, "callbacks": rounds + races,
                         "callback_runs": callback_runs, "races": races,
                         "races_released_once": released_once,
                         "commit_gap_ms_median": round(median, 2),
                         "commit_gap_ms_max": round(max(gaps_ms), 2)}), started)


def _barrier_round(cluster: Cluster, url: str, folder: Path, n: int) -> tuple[FanIn, float]:
    """One fan-in of 4 whose last 2 dependencies run on the two workers (``-c 1`` each)
    and wait on one barrier; the barrier is opened once both run. Returns the fan-in and
    the milliseconds between the two last completions (their ``finished_at``)."""
    barrier = folder / f"barrier-{n}"
    ((header, cb),) = enqueue_fan_ins(url, [(
        [chaos.work.job(0.0), chaos.work.job(0.0),
         chaos.at_barrier.job(str(barrier)), chaos.at_barrier.job(str(barrier))],
        chaos.gather.job(tag=f"round {n}"))])
    last_two = header[2:]

    def ready() -> bool:
        pids = {e.pid for e in cluster.events() if e.kind == "start" and e.job in last_two}
        return len(pids) == 2 and count_in(url, header[:2], "completed") == 2

    cluster.wait(ready, 30, f"round {n}: both last dependencies running, on two processes")
    barrier.touch()
    cluster.wait(functools.partial(_at_least, url, [cb], 1), 30,
                 f"round {n}: the callback completed")
    finished = [row[0] for row in query(
        url, "SELECT finished_at FROM conveyor_jobs_all WHERE id IN (%s, %s)", last_two)]
    return (header, cb), _gap_ms(finished)


def _in_queue(spec: JobSpec, queue: str) -> JobSpec:
    return dataclasses.replace(spec, options=dataclasses.replace(spec.options, queue=queue))


def _fetch(queue: str) -> JobFetchAvailableParams:
    return JobFetchAvailableParams(queue=queue, limit=500, owner="racer", lease_ttl=60)


def _complete(job: Job) -> JobAckManyParams:
    assert job.lease_token is not None
    return JobAckManyParams([JobAck(job.id, job.lease_token, JobState.COMPLETED,
                                    result_json=str(job.id))])


async def _claim_all(s: Storage, queue: str) -> dict[int, Job]:
    out: dict[int, Job] = {}
    while got := await s.job_fetch_available(_fetch(queue)):
        out.update((j.id, j) for j in got)
    return out


async def race_releases(url: str, planned: Sequence[FanIn], v: list[str]) -> int:
    """Both dependencies of each fan-in claimed, then completed at the same instant on two
    connections (each storage its own; on SQLite its own thread): each callback must be
    released exactly once, with both results. Returns how many were."""
    once = 0
    a, b = create_storage(url, WakeHub()), create_storage(url, WakeHub())
    await a.open()
    await b.open()
    try:
        claimed = await _claim_all(a, RACE_QUEUE)
        for header, _ in planned:
            first, second = (claimed[i] for i in header)
            acked = await asyncio.gather(a.job_ack_many(_complete(first)),
                                         b.job_ack_many(_complete(second)))
            if list(acked) != [[first.id], [second.id]]:
                v.append(f"race {header}: an ack was refused: {acked}")
        released = await _claim_all(a, RACE_CALLBACKS)
        for header, cb in planned:
            job = released.pop(cb, None)
            if job is None:
                v.append(f"race {header}: callback {cb} was never released")
            elif job.kwargs.get("results") != header:
                v.append(f"race {header}: callback {cb} got results {job.kwargs.get('results')}")
            else:
                once += await a.job_ack_many(_complete(job)) == [cb]
        if released:
            v.append(f"callbacks released that no race made: {sorted(released)}")
        if await a.job_fetch_available(_fetch(RACE_CALLBACKS)):
            v.append("a callback was released a second time")
        return once
    finally:
        await a.close()
        await b.close()


def _gap_ms(finished: list[Any]) -> float:
    """Milliseconds between two ``finished_at`` values (datetimes, or SQLite's text)."""
    stamps = [v if isinstance(v, datetime) else _sqlite_time(v) for v in finished]
    return abs((stamps[0] - stamps[1]).total_seconds()) * 1000


def _sqlite_time(value: Any) -> datetime:
    if isinstance(value, int | float):  # unix seconds
        return datetime.fromtimestamp(float(value), UTC)
    return datetime.fromisoformat(str(value))


# -- 17 -------------------------------------------------------------------------------------


def test_composition_batch_last_job_retried(db_url: str, chaos_dir: Path, started: float,
                                            request: pytest.FixtureRequest) -> None:
    """Scenario 17: batches whose last job fails once, after every other job of the batch
    completed, and is retried to success: on_success and on_complete run exactly once,
    on_discard never (it is cancelled)."""
    count, size = pick(3, 20), pick(20, 100)
    batches: list[Batch] = []
    with Cluster(db_url, chaos_dir) as cluster, Observer(db_url) as observer:
        for i in range(count):
            barrier = chaos_dir / f"batch-{i}"
            specs = [*(chaos.work.job(0.01) for _ in range(size - 1)),
                     chaos.fail_once_after.job(str(barrier))]
            batches.append(enqueue_batch(db_url, specs, f"batch {i}"))
        others = [j.id for b in batches for j in b.jobs[:-1]]
        # each last job holds a slot while it waits: room for all of them on one worker
        cluster.start("-c", str(count + 8))
        cluster.start("-c", str(count + 8))
        cluster.wait(lambda: count_in(db_url, others, "completed") == len(others), pick(60, 240),
                     "every job but the last of each batch completed")
        for i in range(count):
            (chaos_dir / f"batch-{i}").touch()
        callbacks = [c for b in batches for c in (b.on_success, b.on_complete, b.on_discard)
                     if c is not None]
        ids = [*(j.id for b in batches for j in b.jobs), *callbacks]
        cluster.wait(lambda: all_final(db_url, len(ids)), pick(60, 240), "every job final")
    events = cluster.events()
    rows, runs = jobs(db_url), starts(events)
    outcome = check(db_url, events, ids, observer, expect=_batch_expectation(batches))
    for i, b in enumerate(batches):
        outcome.violations += _check_batch(db_url, b, rows, runs, events, f"batch {i}")
    callback_runs = sum(runs[c] for c in callbacks)
    finish(Result(17, "batch whose last job fails and is retried", backend_of(db_url), len(ids),
                  f"{count} batches of {size}: the last job fails once after the others "
                  "completed, then is retried to success", request.node.nodeid, outcome,
                  notes=f"{callback_runs} callback runs for {count} batches (on_success and "
                        "on_complete exactly once each, on_discard never: cancelled)",
                  extra={"batches": count, "size": size, "callbacks": 2 * count,
                         "callback_runs": callback_runs}), started)


def _batch_expectation(batches: Sequence[Batch]) -> Any:
    """Every job completed, except each batch's on_discard callback: cancelled."""
    discards = {b.on_discard for b in batches}

    def expect(job: Job) -> str | None:
        want = JobState.CANCELLED if job.id in discards else JobState.COMPLETED
        return None if job.state == want else f"expected {want.value}, is {job.state.value}"

    return expect


def _check_batch(url: str, b: Batch, rows: dict[int, Job], runs: collections.Counter[int],
                 events: Sequence[Event], what: str) -> list[str]:
    out: list[str] = []
    now = get_batch(url, b.id)
    if (now.total, now.completed, now.discarded, now.cancelled) != (len(b.jobs), len(b.jobs), 0, 0) \
            or not now.finished:
        out.append(f"{what}: counts total {now.total} completed {now.completed} discarded "
                   f"{now.discarded} cancelled {now.cancelled}, finished {now.finished}")
    last = rows[b.jobs[-1].id]
    if last.attempt != 2 or len(last.errors) != 1:
        out.append(f"{what}: the last job ran {last.attempt} attempts with {len(last.errors)} errors")
    others_finished = max(rows[j.id].finished_at or last.created_at for j in b.jobs[:-1])
    if last.finished_at is None or last.finished_at < others_finished:
        out.append(f"{what}: the retried job was not the last to finish")
    for name, cb in (("on_success", b.on_success), ("on_complete", b.on_complete)):
        assert cb is not None
        out += check_callback(rows.get(cb), events, 0, f"{what} {name}")
        if not ran_after(events, [j.id for j in b.jobs], cb):
            out.append(f"{what} {name}: started before the batch's last job ended")
    if b.on_discard is not None and runs[b.on_discard]:
        out.append(f"{what}: on_discard ran {runs[b.on_discard]} times")
    return out
