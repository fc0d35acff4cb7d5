"""Scenario 9: cancel, rescue, retry and heartbeat racing a completion, a thousand times.

Each actor has its own storage (its own connection; on SQLite its own thread), so the
racing statements really run concurrently. After every race exactly one outcome holds,
and it is consistent with what each racer was told; a completed job never flips.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import cast

import pytest

from conveyor import Job, JobState
from conveyor._storage import (
    JobAck,
    JobAckManyParams,
    JobFetchAvailableParams,
    JobHeartbeatManyParams,
    JobInsert,
    JobLease,
    JobRescueExpiredParams,
    Storage,
    WakeHub,
    create_storage,
)

from .harness import Outcome, Result, pick
from .test_processes import backend_of, finish

BATCH = 25


def insert(n: int) -> list[JobInsert]:
    return [JobInsert(task="race", queue="race", args_json="[]", kwargs_json="{}", priority=0,
                      max_attempts=5, tags_json="[]", meta_json="{}") for _ in range(n)]


def claim(ttl: float) -> JobFetchAvailableParams:
    return JobFetchAvailableParams(queue="race", limit=BATCH, owner="racer", lease_ttl=ttl)


def complete(job: Job) -> JobAckManyParams:
    assert job.lease_token is not None
    return JobAckManyParams([JobAck(job.id, job.lease_token, JobState.COMPLETED, result_json="1")])


async def get(s: Storage, job_id: int) -> Job:
    job = await s.job_get(job_id)
    assert job is not None
    return job


async def race_cancel(a: Storage, b: Storage, v: list[str]) -> None:
    """complete | fail  vs  cancel_job."""
    jobs = await a.job_fetch_available(claim(60))
    assert len(jobs) == BATCH
    fail = {j.id for j in jobs[::2]}

    def ack(j: Job) -> JobAckManyParams:
        assert j.lease_token is not None
        if j.id in fail:
            return JobAckManyParams([JobAck(j.id, j.lease_token, JobState.RETRYABLE, delay=0,
                                            error_json='{"error":"boom"}')])
        return complete(j)

    results = await asyncio.gather(*[a.job_ack_many(ack(j)) for j in jobs],
                                   *[b.job_cancel(j.id) for j in jobs])
    acked, cancels = results[:BATCH], cast(list[Job | None], results[BATCH:])
    for job, applied, cancelled in zip(jobs, acked, cancels, strict=True):
        now = await get(a, job.id)
        if applied != [job.id]:
            v.append(f"job {job.id}: its own ack was refused: the lease was not lost")
        want = JobState.CANCELLED if job.id in fail else JobState.COMPLETED
        if now.state != want:
            v.append(f"job {job.id}: {now.state} after racing cancel (wanted {want})")
        if cancelled is not None and cancelled.state not in (JobState.RUNNING, JobState.CANCELLED):
            v.append(f"job {job.id}: cancel answered {cancelled.state}")
        # Final means final: a late cancel changes nothing.
        if await b.job_cancel(job.id) is not None or (await get(b, job.id)).state != want:
            v.append(f"job {job.id}: a cancel after the end changed it")


async def race_rescue(a: Storage, b: Storage, v: list[str]) -> None:
    """complete  vs  rescue of the (already expired) lease."""
    jobs = await a.job_fetch_available(claim(-1))
    results = await asyncio.gather(*[a.job_ack_many(complete(j)) for j in jobs],
                                   b.job_rescue_expired(JobRescueExpiredParams()))
    acked, rescued = results[:-1], set(results[-1])
    for job, applied in zip(jobs, acked, strict=True):
        now = await get(a, job.id)
        won = applied == [job.id]
        if won == (job.id in rescued):
            v.append(f"job {job.id}: ack applied={won} and rescued={job.id in rescued}")
        if won and now.state != JobState.COMPLETED:
            v.append(f"job {job.id}: acked but {now.state}")
        if not won and (now.state != JobState.AVAILABLE or now.attempt != 1
                        or "lease expired" not in now.errors[-1]["error"]):
            v.append(f"job {job.id}: rescued but {now.state} attempt {now.attempt}")
    # The rescued ones run again, once.
    while again := await a.job_fetch_available(claim(60)):
        for job in again:
            if job.attempt != 2:
                v.append(f"job {job.id}: re-run as attempt {job.attempt}")
            await a.job_ack_many(complete(job))


async def race_retry(a: Storage, b: Storage, v: list[str]) -> None:
    """complete  vs  retry_job (which must refuse a running job)."""
    jobs = await a.job_fetch_available(claim(60))
    results = await asyncio.gather(*[a.job_ack_many(complete(j)) for j in jobs],
                                   *[b.job_retry(j.id) for j in jobs])
    acked, retried = results[:BATCH], results[BATCH:]
    for job, applied, again in zip(jobs, acked, retried, strict=True):
        now = await get(a, job.id)
        if applied != [job.id]:
            v.append(f"job {job.id}: its own ack was refused")
        if again is None and now.state != JobState.COMPLETED:
            v.append(f"job {job.id}: retry refused yet {now.state}")
        if again is not None and (now.state != JobState.AVAILABLE or now.result is None):
            v.append(f"job {job.id}: retry applied to a job that had not completed ({now.state})")
    while more := await a.job_fetch_available(claim(60)):  # explicit retries run again
        for job in more:
            await a.job_ack_many(complete(job))


async def race_heartbeat(a: Storage, b: Storage, v: list[str]) -> None:
    """heartbeat  vs  rescue of the (already expired) lease."""
    jobs = await a.job_fetch_available(claim(-1))
    leases = [JobLease(j.id, j.lease_token or 0) for j in jobs]
    beat, rescued = await asyncio.gather(
        a.job_heartbeat_many(JobHeartbeatManyParams(leases, lease_ttl=60)),
        b.job_rescue_expired(JobRescueExpiredParams()))
    for job in jobs:
        now = await get(a, job.id)
        held = job.id in beat.held
        if held == (job.id in rescued):
            v.append(f"job {job.id}: held={held} and rescued={job.id in rescued}")
        if held != (now.state == JobState.RUNNING):
            v.append(f"job {job.id}: held={held} but {now.state}")
        ack = await a.job_ack_many(complete(job))
        if (ack == [job.id]) != held:
            v.append(f"job {job.id}: the fence let a lost lease complete (held={held})")
    while more := await a.job_fetch_available(claim(60)):
        for job in more:
            await a.job_ack_many(complete(job))


RACES: dict[str, Callable[[Storage, Storage, list[str]], Awaitable[None]]] = {
    "cancel": race_cancel, "rescue": race_rescue, "retry": race_retry, "heartbeat": race_heartbeat,
}


def test_races_against_completion(db_url: str, tmp_path: Path, started: float,
                                  request: pytest.FixtureRequest) -> None:
    """Scenario 9: a thousand races of each kind; every one ends in exactly one state."""
    per_kind = pick(300, 2000)
    rounds = per_kind // BATCH
    violations: list[str] = []
    counts: dict[str, int] = {}

    async def main() -> None:
        a, b = create_storage(db_url, WakeHub()), create_storage(db_url, WakeHub())
        await a.open()
        await b.open()
        try:
            for name, race in RACES.items():
                t0 = time.monotonic()
                for _ in range(rounds):
                    await a.job_insert_many(insert(BATCH))
                    await race(a, b, violations)
                counts[name] = rounds * BATCH
                counts[f"{name}_seconds"] = round(time.monotonic() - t0)
            left = await a.job_fetch_available(claim(60))
            if left:
                violations.append(f"{len(left)} jobs were left available")
        finally:
            await a.close()
            await b.close()

    asyncio.run(main())
    total = sum(counts[k] for k in RACES)
    outcome = Outcome(jobs=total, violations=violations)
    finish(Result(9, "cancel / rescue / retry / heartbeat racing completion", backend_of(db_url),
                  total, f"{per_kind} races of each: cancel, rescue, retry and heartbeat "
                  "against a completion, two connections", request.node.nodeid, outcome,
                  notes="exactly one outcome per race, consistent with what each racer was "
                        "told; completed never flips", extra=counts), started)
