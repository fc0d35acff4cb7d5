"""The storage contract: every backend must pass every test here, unchanged."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import conveyor
from conveyor import Conveyor, JobState
from conveyor._storage import (
    JobAck,
    JobAckManyParams,
    JobFetchAvailableParams,
    JobHeartbeatManyParams,
    JobInsert,
    JobLease,
    JobListParams,
    JobQueueDeleteParams,
    JobRescueExpiredParams,
    NodeUpsertParams,
    StagedJob,
    Storage,
    load_migrations,
    load_queries,
)

T = TypeVar("T")


def run(app: Conveyor, body: Callable[[Storage], Awaitable[T]]) -> T:
    async def main() -> T:
        try:
            return await body(await app.storage())
        finally:
            await app.close_async()

    return asyncio.run(main())


def ins(queue: str = "default", priority: int = 0, delay: float | None = None,
        max_attempts: int = 3, task: str = "t") -> JobInsert:
    return JobInsert(task=task, queue=queue, args_json="[1]", kwargs_json='{"k":"v"}',
                     priority=priority, max_attempts=max_attempts, tags_json='["a"]',
                     meta_json="{}", delay=delay)


def fetch(queue: str = "default", limit: int = 10, ttl: float = 30.0,
          owner: str = "node-a") -> JobFetchAvailableParams:
    return JobFetchAvailableParams(queue=queue, limit=limit, owner=owner, lease_ttl=ttl)


def test_dialects_define_the_same_queries_and_migrations() -> None:
    assert load_queries("sqlite").keys() == load_queries("postgres").keys()
    root = Path(conveyor.__file__).parent / "_storage"
    assert sorted(p.name for p in (root / "sqlite" / "sql").glob("*.sql")) == sorted(
        p.name for p in (root / "postgres" / "sql").glob("*.sql")
    )
    sqlite_versions = [m.version for m in load_migrations("sqlite")]
    assert sqlite_versions == [m.version for m in load_migrations("postgres")]


def test_both_backends_implement_every_protocol_method() -> None:
    from conveyor._storage.postgres import PostgresStorage
    from conveyor._storage.sqlite import SQLiteStorage

    wanted = {n for n, _ in inspect.getmembers(Storage) if not n.startswith("_")}
    for cls in (SQLiteStorage, PostgresStorage):
        assert wanted <= set(dir(cls)), wanted - set(dir(cls))


def test_insert_returns_rows_in_order_with_states(app: Conveyor) -> None:
    async def body(s: Storage) -> None:
        jobs = await s.job_insert_many([ins(), ins(delay=60), ins(queue="q2")])
        assert [j.id for j in jobs] == sorted(j.id for j in jobs)
        assert [j.state for j in jobs] == [JobState.AVAILABLE, JobState.SCHEDULED, JobState.AVAILABLE]
        assert jobs[0].args == [1] and jobs[0].kwargs == {"k": "v"} and jobs[0].tags == ["a"]
        assert jobs[1].scheduled_at > jobs[0].scheduled_at
        assert jobs[2].queue == "q2" and jobs[0].attempt == 0

    run(app, body)


def test_fetch_claims_by_priority_within_limit_and_queue(app: Conveyor) -> None:
    async def body(s: Storage) -> None:
        await s.job_insert_many([ins(priority=0), ins(priority=5), ins(priority=1),
                                 ins(queue="other"), ins(delay=60)])
        got = await s.job_fetch_available(fetch(limit=2))
        assert [j.priority for j in got] == [5, 1]
        assert all(j.state == JobState.RUNNING and j.attempt == 1 for j in got)
        assert all(j.lease_owner == "node-a" and j.lease_token for j in got)
        assert all(j.lease_expires_at and j.attempted_at for j in got)
        rest = await s.job_fetch_available(fetch(limit=10))
        assert [j.priority for j in rest] == [0]  # the scheduled and other-queue jobs stay
        assert await s.job_fetch_available(fetch(limit=10)) == []

    run(app, body)


def test_concurrent_fetches_never_claim_a_job_twice(app: Conveyor) -> None:
    async def body(s: Storage) -> None:
        await s.job_insert_many([ins() for _ in range(300)])
        batches = await asyncio.gather(*(s.job_fetch_available(fetch(limit=7)) for _ in range(60)))
        ids = [j.id for batch in batches for j in batch]
        assert len(ids) == len(set(ids)) == 300

    run(app, body)


def test_ack_is_fenced_by_lease_token(app: Conveyor) -> None:
    async def body(s: Storage) -> None:
        await s.job_insert_many([ins()])
        (job,) = await s.job_fetch_available(fetch())
        assert job.lease_token is not None
        stale = JobAck(job.id, job.lease_token + 1, JobState.COMPLETED, result_json='"late"')
        assert await s.job_ack_many(JobAckManyParams([stale])) == []
        good = JobAck(job.id, job.lease_token, JobState.COMPLETED, result_json='{"ok":true}')
        assert await s.job_ack_many(JobAckManyParams([good])) == [job.id]
        # The same ack again no longer holds the lease: nothing changes.
        assert await s.job_ack_many(JobAckManyParams([good])) == []
        done = await s.job_get(job.id)
        assert done is not None and done.state == JobState.COMPLETED
        assert done.result == {"ok": True} and done.finished_at is not None
        assert done.lease_token is None and done.lease_owner is None

    run(app, body)


def test_ack_batch_applies_mixed_outcomes(app: Conveyor) -> None:
    async def body(s: Storage) -> None:
        await s.job_insert_many([ins() for _ in range(4)])
        a, b, c, d = await s.job_fetch_available(fetch())
        err = json.dumps({"attempt": 1, "error": "ValueError: x"})
        acks = [
            JobAck(a.id, a.lease_token or 0, JobState.COMPLETED, result_json="1"),
            JobAck(b.id, b.lease_token or 0, JobState.RETRYABLE, delay=3600, error_json=err),
            JobAck(c.id, c.lease_token or 0, JobState.SCHEDULED, delay=3600, attempt_delta=-1),
            JobAck(d.id, d.lease_token or 0, JobState.DISCARDED, error_json=err),
        ]
        assert sorted(await s.job_ack_many(JobAckManyParams(acks))) == sorted([a.id, b.id, c.id, d.id])
        rows = {j.id: j for j in await s.job_list(JobListParams(limit=10))}
        assert rows[a.id].state == JobState.COMPLETED and rows[a.id].result == 1
        assert rows[b.id].state == JobState.RETRYABLE and rows[b.id].errors == [json.loads(err)]
        assert rows[b.id].scheduled_at > b.scheduled_at and rows[b.id].finished_at is None
        assert rows[c.id].state == JobState.SCHEDULED and rows[c.id].attempt == 0
        assert rows[d.id].state == JobState.DISCARDED and rows[d.id].finished_at is not None

    run(app, body)


def test_stage_due_moves_only_due_jobs(app: Conveyor) -> None:
    async def body(s: Storage) -> None:
        await s.job_insert_many([ins(delay=0.05, queue="soon"), ins(delay=3600)])
        deadline = asyncio.get_running_loop().time() + 5
        staged: list[StagedJob] = []
        while not staged and asyncio.get_running_loop().time() < deadline:
            staged = await s.job_stage_due()
            await asyncio.sleep(0.02)
        assert [(j.queue, j.previous) for j in staged] == [("soon", JobState.SCHEDULED)]
        counts = await s.job_count_by_state()
        assert counts == {"available": 1, "scheduled": 1}

    run(app, body)


def test_heartbeat_extends_held_leases_and_reports_cancels(app: Conveyor) -> None:
    async def body(s: Storage) -> None:
        await s.job_insert_many([ins(), ins()])
        a, b = await s.job_fetch_available(fetch(ttl=5))
        await s.job_cancel(b.id)
        leases = [JobLease(a.id, a.lease_token or 0), JobLease(b.id, b.lease_token or 0),
                  JobLease(a.id, (a.lease_token or 0) + 1)]
        result = await s.job_heartbeat_many(JobHeartbeatManyParams(leases, lease_ttl=600))
        assert result.held == {a.id, b.id} and result.cancel_requested == {b.id}
        after = await s.job_get(a.id)
        assert after is not None and after.lease_expires_at is not None
        assert a.lease_expires_at is not None and after.lease_expires_at > a.lease_expires_at

    run(app, body)


def test_rescue_returns_expired_jobs_and_counts_the_attempt(app: Conveyor) -> None:
    async def body(s: Storage) -> None:
        await s.job_insert_many([ins(max_attempts=2), ins(max_attempts=1)])
        a, b = await s.job_fetch_available(fetch(ttl=0.01))
        rescued: list[int] = []
        deadline = asyncio.get_running_loop().time() + 5
        while len(rescued) < 2 and asyncio.get_running_loop().time() < deadline:
            rescued += await s.job_rescue_expired(JobRescueExpiredParams())
            await asyncio.sleep(0.02)
        assert sorted(rescued) == sorted([a.id, b.id])
        ra, rb = await s.job_get(a.id), await s.job_get(b.id)
        assert ra is not None and rb is not None
        assert ra.state == JobState.AVAILABLE and ra.attempt == 1 and ra.lease_token is None
        assert rb.state == JobState.DISCARDED and rb.finished_at is not None
        assert ra.errors[0]["attempt"] == 1 and "lease expired" in ra.errors[0]["error"]
        # The old owner's late ack is fenced out.
        late = JobAck(a.id, a.lease_token or 0, JobState.COMPLETED)
        assert await s.job_ack_many(JobAckManyParams([late])) == []

    run(app, body)


def test_delete_by_queue_removes_every_job_of_that_queue_only(app: Conveyor) -> None:
    async def body(s: Storage) -> None:
        await s.job_insert_many([ins(queue="bench"), ins(queue="bench", delay=60), ins(queue="bench"), ins()])
        (running,) = await s.job_fetch_available(fetch(queue="bench", limit=1))
        first = await s.job_delete_by_queue(JobQueueDeleteParams("bench", limit=2))
        assert len(first.deleted) == 2 and first.next_after == max(c.id for c in first.deleted)
        rest = await s.job_delete_by_queue(JobQueueDeleteParams("bench", first.next_after, 2))
        assert len(rest.deleted) == 1 and rest.next_after is None
        gone = {c.id: c.previous for c in [*first.deleted, *rest.deleted]}
        assert gone[running.id] is JobState.RUNNING  # whatever its state
        assert sorted(gone.values()) == sorted([JobState.AVAILABLE, JobState.RUNNING,
                                                JobState.SCHEDULED])
        assert await s.job_count_by_state(queue="bench") == {}
        assert await s.job_count_by_state() == {"available": 1}
        assert (await s.job_delete_by_queue(JobQueueDeleteParams("bench"))).deleted == []

    run(app, body)


def test_cancel_requested_turns_a_retry_into_cancelled(app: Conveyor) -> None:
    async def body(s: Storage) -> None:
        await s.job_insert_many([ins()])
        (a,) = await s.job_fetch_available(fetch())
        flagged = await s.job_cancel(a.id)
        assert flagged is not None and flagged.state == JobState.RUNNING and flagged.cancel_requested
        ack = JobAck(a.id, a.lease_token or 0, JobState.RETRYABLE, delay=1, error_json='{"e":1}')
        assert await s.job_ack_many(JobAckManyParams([ack])) == [a.id]
        final = await s.job_get(a.id)
        assert final is not None and final.state == JobState.CANCELLED and final.finished_at

    run(app, body)


def test_cancel_and_retry_follow_the_state_machine(app: Conveyor) -> None:
    async def body(s: Storage) -> None:
        a, b = await s.job_insert_many([ins(), ins(max_attempts=1)])
        cancelled = await s.job_cancel(a.id)
        assert cancelled is not None and cancelled.state == JobState.CANCELLED
        assert await s.job_cancel(a.id) is None  # already final
        (running,) = await s.job_fetch_available(fetch())
        assert await s.job_retry(running.id) is None  # running: not retryable
        ack = JobAck(b.id, running.lease_token or 0, JobState.DISCARDED, error_json='{"e":1}')
        await s.job_ack_many(JobAckManyParams([ack]))
        retried = await s.job_retry(b.id)
        assert retried is not None and retried.state == JobState.AVAILABLE
        assert retried.max_attempts == 2 and retried.finished_at is None
        assert await s.job_get(10**9) is None
        assert await s.job_retry(10**9) is None

    run(app, body)


def test_list_filters_and_paginates_newest_first(app: Conveyor) -> None:
    async def body(s: Storage) -> None:
        jobs = await s.job_insert_many([ins(task="x") for _ in range(5)] + [ins(task="y", queue="q")])
        page = await s.job_list(JobListParams(task="x", limit=3))
        assert [j.id for j in page] == [j.id for j in jobs[:5]][::-1][:3]
        nxt = await s.job_list(JobListParams(task="x", limit=3, before_id=page[-1].id))
        assert [j.id for j in nxt] == [jobs[1].id, jobs[0].id]
        assert [j.task for j in await s.job_list(JobListParams(queue="q"))] == ["y"]
        assert await s.job_list(JobListParams(state=JobState.RUNNING)) == []
        counts = await s.job_count_by_state(queue="q")
        assert counts == {"available": 1}

    run(app, body)


def test_node_upsert_and_delete(app: Conveyor) -> None:
    async def body(s: Storage) -> None:
        node = NodeUpsertParams(id="n1", hostname="h", pid=1, queues_json='{"default":1}',
                                tasks_json='["t1","t2"]', ttl=15)
        await s.node_upsert(node)
        first = {n.id: n for n in await s.node_list()}
        assert list(first) == ["n1"]
        listed = first["n1"]
        assert (listed.hostname, listed.pid, listed.queues, listed.tasks, listed.ttl) == (
            "h", 1, {"default": 1}, ["t1", "t2"], 15)
        assert listed.alive
        assert listed.heartbeat_at >= listed.started_at
        # a heartbeat is the same upsert: it updates the row (not a second one) and keeps
        # the start time
        await s.node_upsert(dataclasses.replace(node, queues_json='{"q":3}', ttl=20))
        again = await s.node_list()
        assert [(n.id, n.pid, n.queues, n.ttl) for n in again] == [("n1", 1, {"q": 3}, 20)]
        assert again[0].started_at == listed.started_at
        assert again[0].heartbeat_at >= listed.heartbeat_at
        await s.node_delete("n1")
        assert await s.node_list() == []

    run(app, body)


def test_wake_subscribers_hear_about_new_jobs(app: Conveyor) -> None:
    async def body(s: Storage) -> None:
        heard: asyncio.Queue[str] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def on_wake(queue: str) -> None:
            loop.call_soon_threadsafe(heard.put_nowait, queue)

        async def next_wake(expected: str) -> str:
            try:
                return await asyncio.wait_for(heard.get(), timeout=10)
            except TimeoutError:
                raise AssertionError(f"no wake-up within 10 s (expected {expected!r})") from None

        unsubscribe = s.wake_subscribe(on_wake)
        try:
            if s.capabilities.dialect == "postgres":
                # The LISTEN connection announces itself with "*" once it listens (a wake
                # sent before that is lost). Wait for it, so that what follows can only be
                # the insert's own notification.
                assert await next_wake("*") == "*"
            drained = []
            while not heard.empty():
                drained.append(heard.get_nowait())
            assert drained == []  # nothing else is inserting
            await s.job_insert_many([ins(queue="wake")])
            # the insert wakes its own queue by name ("*" would wake every producer)
            assert await next_wake("wake") == "wake"
        finally:
            unsubscribe()

    run(app, body)


def test_the_protocol_has_one_calling_convention() -> None:
    """protocol.py's rule: a method takes one value as a plain argument (optional values
    and flags by keyword), or one ``*Params`` object holding several; no ``*Params``
    class carries a single field."""
    import conveyor._storage as face

    for name, method in vars(Storage).items():
        if name.startswith("_") or not inspect.isfunction(method):
            continue
        params = [p for p in inspect.signature(method).parameters.values()
                  if p.name not in ("self", "connection")]
        positional = [p for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
        assert len(positional) <= 1, f"{name} takes several positional values"
        assert all(p.default is p.empty for p in positional), f"{name}: optional by keyword"
        if positional and "Params" in str(positional[0].annotation):
            assert all(p.kind is not p.KEYWORD_ONLY for p in params), name
    single = [name for name in face.__all__ if name.endswith("Params")
              and dataclasses.is_dataclass(cls := getattr(face, name))
              and len(dataclasses.fields(cls)) < 2]
    assert not single, f"single-field params classes (take the value plainly): {single}"
