"""A Hypothesis state machine over the storage protocol, on both backends, checked step
by step against a tiny pure-Python model of the job state machine (docs/states.md).

Steps: enqueue, fetch, ack (complete, fail, snooze, give back, cancel, discard; with the
live or a stale lease token), heartbeat, cancel_job, rescue, retry and stage. Time is
controlled through the parameters, never by faking the database clock: a lease of -1 s
is expired at once and one of an hour is not; a delay of 0 or -1 s is due at once and
one of an hour is not. Ordering within a priority uses the ``scheduled_at`` the
database assigned, read back after every step.

Quick by default (part of ``make test``); ``CONVEYOR_CHAOS=long`` runs many more
examples, randomised, and ``make chaos`` records the counts in docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Coroutine
from datetime import datetime
from typing import Any, ClassVar, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from conveyor import Job, JobState
from conveyor._storage import (
    JobAck,
    JobAckManyParams,
    JobFetchAvailableParams,
    JobHeartbeatManyParams,
    JobInsert,
    JobLease,
    JobListParams,
    JobRescueExpiredParams,
    Storage,
    WakeHub,
    create_storage,
)

from .chaos.harness import LONG, Outcome, Result, execute, pick, record

T = TypeVar("T")
S = JobState
WAITING = (S.SCHEDULED, S.AVAILABLE, S.RETRYABLE)
FINAL = (S.COMPLETED, S.CANCELLED, S.DISCARDED)
FAR = 3600.0
QUEUES = ("a", "b")


@dataclasses.dataclass
class Model:
    """What the reference model knows about one job."""

    id: int
    queue: str
    priority: int
    max_attempts: int
    state: JobState
    due: bool
    attempt: int = 0
    token: int | None = None
    last_token: int | None = None
    expired: bool = False
    cancel_requested: bool = False
    errors: int = 0
    result: Any = None
    scheduled_at: datetime | None = None


class StorageMachine(RuleBasedStateMachine):
    url: ClassVar[str] = ""
    runs: ClassVar[int] = 0
    steps: ClassVar[int] = 0

    def __init__(self) -> None:
        super().__init__()
        type(self).runs += 1
        execute(self.url, "DELETE FROM conveyor_jobs")
        self.loop = asyncio.new_event_loop()
        self.storage: Storage = create_storage(self.url, WakeHub())
        self.run(self.storage.open())
        self.jobs: dict[int, Model] = {}

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        type(self).steps += 1
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        try:
            self.run(self.storage.close())
        finally:
            self.loop.close()

    def pick(self, index: int, states: tuple[JobState, ...] | None = None) -> Model | None:
        chosen = [m for m in self.jobs.values() if states is None or m.state in states]
        return chosen[index % len(chosen)] if chosen else None

    # -- steps ------------------------------------------------------------------------------

    @rule(n=st.integers(1, 3), queue=st.sampled_from(QUEUES), priority=st.sampled_from([0, 1, 5]),
          max_attempts=st.integers(1, 3), delay=st.sampled_from([None, 0.0, -1.0, FAR]))
    def enqueue(self, n: int, queue: str, priority: int, max_attempts: int,
                delay: float | None) -> None:
        inserts = [JobInsert(task="t", queue=queue, args_json="[]", kwargs_json="{}",
                             priority=priority, max_attempts=max_attempts, tags_json="[]",
                             meta_json="{}", delay=delay) for _ in range(n)]
        got = self.run(self.storage.job_insert_many(inserts))
        state = S.SCHEDULED if delay == FAR else S.AVAILABLE
        assert [j.state for j in got] == [state] * n
        for job in got:
            self.jobs[job.id] = Model(job.id, queue, priority, max_attempts, state, due=delay != FAR)

    @rule(queue=st.sampled_from(QUEUES), limit=st.integers(1, 4), ttl=st.sampled_from([-1.0, FAR]))
    def fetch(self, queue: str, limit: int, ttl: float) -> None:
        ready = sorted((m for m in self.jobs.values() if m.state == S.AVAILABLE and m.queue == queue),
                       key=lambda m: (-m.priority, m.scheduled_at, m.id))
        got = self.run(self.storage.job_fetch_available(
            JobFetchAvailableParams(queue=queue, limit=limit, owner="model", lease_ttl=ttl)))
        assert [j.id for j in got] == [m.id for m in ready[:limit]]
        for job in got:
            m = self.jobs[job.id]
            m.state, m.attempt, m.expired = S.RUNNING, m.attempt + 1, ttl < 0
            assert job.attempt == m.attempt and job.lease_token is not None
            m.token = m.last_token = job.lease_token

    @rule(index=st.integers(0, 99), stale=st.booleans(), outcome=st.sampled_from(
        ["completed", "retry", "retry_later", "snooze", "snooze_later", "give_back", "cancel",
         "discard"]))
    def ack(self, index: int, stale: bool, outcome: str) -> None:
        m = self.pick(index)
        if m is None or m.last_token is None:
            return
        token = m.last_token + 1 if stale else m.last_token
        state, delay, delta, error, result = {
            "completed": (S.COMPLETED, None, 0, None, "1"),
            "retry": (S.RETRYABLE, 0.0, 0, '{"error":"x"}', None),
            "retry_later": (S.RETRYABLE, FAR, 0, '{"error":"x"}', None),
            "snooze": (S.SCHEDULED, 0.0, -1, None, None),
            "snooze_later": (S.SCHEDULED, FAR, -1, None, None),
            "give_back": (S.AVAILABLE, 0.0, -1, None, None),
            "cancel": (S.CANCELLED, None, 0, '{"error":"c"}', None),
            "discard": (S.DISCARDED, None, 0, '{"error":"d"}', None),
        }[outcome]
        ack = JobAck(m.id, token, state, delay=delay, result_json=result, error_json=error,
                     attempt_delta=delta)
        applied = self.run(self.storage.job_ack_many(JobAckManyParams([ack])))
        holds = m.state == S.RUNNING and m.token == token
        assert applied == ([m.id] if holds else []), (outcome, stale, m)
        if not holds:
            return
        if m.cancel_requested and state in WAITING:
            state = S.CANCELLED
        m.state, m.attempt, m.token = state, m.attempt + delta, None
        m.errors += error is not None
        m.result = 1 if result else None
        m.due = delay is None or delay <= 0

    @rule(indexes=st.lists(st.integers(0, 99), min_size=1, max_size=3),
          ttl=st.sampled_from([-1.0, FAR]), stale=st.booleans())
    def heartbeat(self, indexes: list[int], ttl: float, stale: bool) -> None:
        chosen = {m.id: m for i in indexes if (m := self.pick(i)) is not None and m.last_token}
        if not chosen:
            return
        leases = [JobLease(m.id, (m.last_token or 0) + stale) for m in chosen.values()]
        got = self.run(self.storage.job_heartbeat_many(JobHeartbeatManyParams(leases, ttl)))
        held = {m.id for m in chosen.values() if m.state == S.RUNNING and not stale}
        assert got.held == held
        assert got.cancel_requested == {i for i in held if self.jobs[i].cancel_requested}
        for job_id in held:
            self.jobs[job_id].expired = ttl < 0

    @rule(index=st.integers(0, 99))
    def cancel(self, index: int) -> None:
        m = self.pick(index)
        if m is None:
            return
        got = self.run(self.storage.job_cancel(m.id))
        if m.state in WAITING:
            m.state, m.cancel_requested = S.CANCELLED, False
        elif m.state == S.RUNNING:
            m.cancel_requested = True
        else:
            assert got is None
            return
        assert got is not None and got.state == m.state

    @rule()
    def rescue(self) -> None:
        got = self.run(self.storage.job_rescue_expired(JobRescueExpiredParams()))
        expired = [m for m in self.jobs.values() if m.state == S.RUNNING and m.expired]
        assert sorted(got) == sorted(m.id for m in expired)
        for m in expired:
            m.state = (S.CANCELLED if m.cancel_requested else
                       S.DISCARDED if m.attempt >= m.max_attempts else S.AVAILABLE)
            m.token, m.errors, m.due = None, m.errors + 1, True

    @rule(index=st.integers(0, 99))
    def retry(self, index: int) -> None:
        m = self.pick(index)
        if m is None:
            return
        got = self.run(self.storage.job_retry(m.id))
        if m.state in (S.AVAILABLE, S.RUNNING):
            assert got is None
            return
        assert got is not None and got.state == S.AVAILABLE
        m.state, m.due, m.cancel_requested = S.AVAILABLE, True, False
        m.max_attempts = max(m.max_attempts, m.attempt + 1)

    @rule()
    def stage(self) -> None:
        got = self.run(self.storage.job_stage_due())
        due = [m for m in self.jobs.values() if m.state in (S.SCHEDULED, S.RETRYABLE) and m.due]
        assert sorted((j.id, j.previous) for j in got) == sorted((m.id, m.state) for m in due)
        for m in due:
            m.state = S.AVAILABLE

    # -- after every step: the database and the model agree ------------------------------

    @invariant()
    def rows_match_the_model(self) -> None:
        rows: dict[int, Job] = {j.id: j for j in self.run(self.storage.job_list(JobListParams(limit=1000)))}
        assert rows.keys() == self.jobs.keys()
        for job_id, m in self.jobs.items():
            job = rows[job_id]
            seen = (job.state, job.attempt, job.max_attempts, job.cancel_requested, len(job.errors),
                    job.result, job.lease_token, job.finished_at is not None)
            want = (m.state, m.attempt, m.max_attempts, m.cancel_requested, m.errors, m.result,
                    m.token, m.state in FINAL)
            assert seen == want, f"job {job_id}: database {seen} != model {want}"
            m.scheduled_at = job.scheduled_at


def test_storage_matches_the_model(db_url: str, request: pytest.FixtureRequest) -> None:
    started = time.monotonic()
    StorageMachine.url, StorageMachine.runs, StorageMachine.steps = db_url, 0, 0
    config = settings(max_examples=pick(80, 300), stateful_step_count=pick(30, 50), deadline=None,
                      derandomize=not LONG, database=None, print_blob=True,
                      suppress_health_check=[HealthCheck.too_slow])
    run_state_machine_as_test(StorageMachine, settings=config)
    backend = "sqlite" if db_url.startswith("sqlite") else "postgres"
    record(Result(0, "Hypothesis state machine vs a reference model", backend,
                  StorageMachine.runs, f"{StorageMachine.runs} random programs, "
                  f"{StorageMachine.steps} storage calls compared step by step",
                  request.node.nodeid, Outcome(jobs=StorageMachine.runs),
                  seconds=time.monotonic() - started))
