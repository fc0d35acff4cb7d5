"""The flow-control half of the storage contract, on both backends."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import UTC, datetime, timedelta

import psycopg

from conveyor import Conveyor, JobState
from conveyor._storage import (
    ConcurrencyGroup,
    JobAck,
    JobAckManyParams,
    JobInsert,
    JobListParams,
    JobPruneParams,
    JobRescueExpiredParams,
    LeaderElectParams,
    LeaderResignParams,
    NodeUpsertParams,
    QueueUpdateParams,
    RateRequest,
    ScheduleAdvanceParams,
    ScheduleSetPausedParams,
    ScheduleUpsertParams,
    Storage,
)

from .test_storage_contract import fetch, ins, run


def test_clock_now_is_the_database_clock(app: Conveyor) -> None:
    async def body(s: Storage) -> None:
        now = await s.clock_now()
        assert now.tzinfo is not None
        assert abs((now - datetime.now(UTC)).total_seconds()) < 5

    run(app, body)


def test_queue_update_changes_only_flagged_fields(app: Conveyor) -> None:
    async def body(s: Storage) -> None:
        assert await s.queue_list() == []
        await s.queue_update(QueueUpdateParams("mail", paused=True, set_paused=True))
        await s.queue_update(QueueUpdateParams("mail", concurrency=20, scope="per_node",
                                               set_concurrency=True))
        await s.queue_update(QueueUpdateParams("mail", rate_limit="10/s", set_rate_limit=True))
        (q,) = await s.queue_list()
        assert (q.name, q.paused, q.concurrency, q.scope, q.rate_limit) == (
            "mail", True, 20, "per_node", "10/s")
        await s.queue_update(QueueUpdateParams("mail", paused=False, set_paused=True))
        await s.queue_update(QueueUpdateParams("mail", concurrency=None, scope="split",
                                               set_concurrency=True))
        (q,) = await s.queue_list()
        assert (q.paused, q.concurrency, q.scope, q.rate_limit) == (False, None, "split", "10/s")

    run(app, body)


def test_nodes_are_listed_with_liveness(app: Conveyor) -> None:
    async def body(s: Storage) -> None:
        await s.node_upsert(NodeUpsertParams("n1", "host", 7, '{"default": 5}', '["a", "b"]', ttl=15))
        (node,) = await s.node_list(live_within=60)
        assert node.queues == {"default": 5} and node.tasks == ["a", "b"] and node.alive
        (node,) = await s.node_list(live_within=-1)
        assert not node.alive

    run(app, body)


def _backdate_heartbeat(db_url: str, node_id: str, seconds: float) -> None:
    """Make a node's last heartbeat ``seconds`` older, behind the storage's back."""
    if db_url.startswith("sqlite:///"):
        conn = sqlite3.connect(db_url[len("sqlite:///"):], timeout=30)
        with conn:
            conn.execute("UPDATE conveyor_nodes SET heartbeat_at = heartbeat_at - ? WHERE id = ?",
                         (seconds, node_id))
        conn.close()
        return
    with psycopg.connect(db_url, autocommit=True) as pg:
        pg.execute("UPDATE conveyor_nodes SET heartbeat_at = heartbeat_at - %s * interval '1 second'"
                   " WHERE id = %s", (seconds, node_id))


def test_each_node_is_alive_for_its_own_ttl(app: Conveyor, db_url: str) -> None:
    """A node with ttl 60 silent for 20 s is alive and keeps its jobs; one with ttl 5 is
    dead, its running jobs rescued, and pruned once past both its ttl and the age."""
    async def body(s: Storage) -> None:
        await s.node_upsert(NodeUpsertParams("slow", "host", 1, "{}", ttl=60))
        await s.node_upsert(NodeUpsertParams("fast", "host", 2, "{}", ttl=5))
        await s.job_insert_many([ins(), ins()])
        (on_slow,) = await s.job_fetch_available(fetch(limit=1, ttl=300, owner="slow"))
        (on_fast,) = await s.job_fetch_available(fetch(limit=1, ttl=300, owner="fast"))
        for node in ("slow", "fast"):
            await asyncio.to_thread(_backdate_heartbeat, db_url, node, 20)
        nodes = {n.id: n for n in await s.node_list()}
        assert (nodes["slow"].ttl, nodes["slow"].alive) == (60, True)
        assert (nodes["fast"].ttl, nodes["fast"].alive) == (5, False)
        assert all(n.alive for n in await s.node_list(live_within=30))
        assert await s.job_rescue_expired(JobRescueExpiredParams()) == [on_fast.id]
        assert await s.job_rescue_expired(JobRescueExpiredParams(node_ttl=10)) == [on_slow.id]
        await s.job_prune(JobPruneParams(completed_age=3600, discarded_age=3600, node_age=10))
        assert [n.id for n in await s.node_list()] == ["slow"]

    run(app, body)


def test_leader_election_has_one_holder_and_terms(app: Conveyor) -> None:
    async def body(s: Storage) -> None:
        a = await s.leader_elect(LeaderElectParams("a", ttl=0.2))
        assert a is not None and a.node_id == "a" and a.term == 1
        b = await s.leader_elect(LeaderElectParams("b", ttl=0.2))
        assert b is not None and b.node_id == "a"  # a still holds it
        # a longer ttl: the renewal must move the expiry even within one clock tick
        renewed = await s.leader_elect(LeaderElectParams("a", ttl=0.3))
        assert renewed is not None and renewed.term == 1 and renewed.expires_at > a.expires_at
        deadline = asyncio.get_running_loop().time() + 5
        while (took := await s.leader_elect(LeaderElectParams("b", ttl=30))) and took.node_id != "b":
            assert asyncio.get_running_loop().time() < deadline, "expired lease never taken"
            await asyncio.sleep(0.05)
        assert took is not None and took.term == 2
        await s.leader_resign(LeaderResignParams("a"))  # not the holder: no effect
        again = await s.leader_elect(LeaderElectParams("a", ttl=30))
        assert again is not None and again.node_id == "b"
        await s.leader_resign(LeaderResignParams("b"))
        c = await s.leader_elect(LeaderElectParams("c", ttl=30))
        assert c is not None and c.node_id == "c" and c.term == 1

    run(app, body)


def test_schedules_keep_runtime_state_across_redeclaration(app: Conveyor) -> None:
    def decl(cron: str) -> ScheduleUpsertParams:
        return ScheduleUpsertParams("nightly", "report", cron, "Europe/Paris", "[1]", "{}",
                                    None, None, "run_once", 0)

    async def body(s: Storage) -> None:
        await s.schedule_upsert(decl("0 3 * * *"))
        assert await s.schedule_set_paused(ScheduleSetPausedParams("nightly", True))
        assert not await s.schedule_set_paused(ScheduleSetPausedParams("nope", True))
        tick = datetime(2026, 1, 1, 2, 0, tzinfo=UTC)
        await s.schedule_advance(ScheduleAdvanceParams("nightly", tick, 5))
        await s.schedule_advance(ScheduleAdvanceParams("nightly", tick - timedelta(days=1), 4))
        await s.schedule_upsert(decl("0 4 * * *"))
        (row,) = await s.schedule_list()
        assert row.cron == "0 4 * * *" and row.paused and row.args == [1]
        assert row.last_tick == tick and row.last_job_id == 5  # never moves back
        assert await s.schedule_delete("nightly")
        assert await s.schedule_list() == []

    run(app, body)


def test_rate_limit_budget_is_shared_and_refills(app: Conveyor) -> None:
    async def body(s: Storage) -> None:
        req = RateRequest("task:x", interval=0.2, burst=2, count=5)
        (first,) = await s.rate_limit_acquire([req])
        assert first.granted == 2 and 0 < first.wait <= 0.2 + 1e-6
        (second,) = await s.rate_limit_acquire([req])
        assert second.granted == 0 and second.wait > 0
        await asyncio.sleep(second.wait + 0.01)  # the budget refills with time: that is the test
        (third,) = await s.rate_limit_acquire([req])
        assert third.granted == 1

    run(app, body)


def test_concurrency_slots_never_exceed_the_key_limit(app: Conveyor) -> None:
    async def body(s: Storage) -> None:
        rows = [JobInsert(task="t", queue="default", args_json="[]", kwargs_json="{}",
                          priority=0, max_attempts=3, tags_json="[]", meta_json="{}",
                          concurrency_key="user:1") for _ in range(3)]
        await s.job_insert_many(rows)
        jobs = await s.job_fetch_available(fetch())
        leases = [(j.id, j.lease_token or 0) for j in jobs]
        got = await s.job_concurrency_acquire(
            [ConcurrencyGroup("user:1", 1, leases)])
        assert got == {jobs[0].id}
        assert await s.job_concurrency_holders("user:1") == [jobs[0].id]
        none = await s.job_concurrency_acquire(
            [ConcurrencyGroup("user:1", 1, leases[1:])])
        assert none == frozenset()
        await s.job_ack_many(JobAckManyParams(
            [JobAck(jobs[0].id, jobs[0].lease_token or 0, JobState.COMPLETED)]))
        nxt = await s.job_concurrency_acquire(
            [ConcurrencyGroup("user:1", 1, leases[1:])])
        assert nxt == {jobs[1].id}

    run(app, body)


def test_unique_keys_return_the_live_holder(app: Conveyor) -> None:
    def uniq(key: str, states: str = ",available,scheduled,running,retryable,") -> JobInsert:
        return JobInsert(task="t", queue="default", args_json="[]", kwargs_json="{}",
                         priority=0, max_attempts=3, tags_json="[]", meta_json="{}",
                         unique_key=key, unique_states=states)

    async def body(s: Storage) -> None:
        a, b, dup, c = await s.job_insert_many(
            [uniq("k1"), ins(), uniq("k1"), uniq("k2")])
        assert not a.duplicate and not b.duplicate and not c.duplicate
        assert dup.duplicate and dup.id == a.id
        (again,) = await s.job_insert_many([uniq("k1")])
        assert again.duplicate and again.id == a.id
        # Once the holder leaves the unique states, the key is free again.
        claimed = await s.job_fetch_available(fetch())
        holder = next(j for j in claimed if j.id == a.id)
        await s.job_ack_many(JobAckManyParams(
            [JobAck(holder.id, holder.lease_token or 0, JobState.COMPLETED)]))
        (fresh,) = await s.job_insert_many([uniq("k1")])
        assert not fresh.duplicate and fresh.id != a.id

    run(app, body)


def test_count_ahead_and_prune(app: Conveyor) -> None:
    async def body(s: Storage) -> None:
        jobs = await s.job_insert_many([ins(priority=1), ins(), ins(), ins(priority=5)])
        assert await s.job_count_ahead(jobs[2].id) == 3
        assert await s.job_count_ahead(jobs[3].id) == 0
        claimed = await s.job_fetch_available(fetch(limit=2))
        err = json.dumps({"error": "x"})
        await s.job_ack_many(JobAckManyParams([
            JobAck(claimed[0].id, claimed[0].lease_token or 0, JobState.COMPLETED),
            JobAck(claimed[1].id, claimed[1].lease_token or 0, JobState.DISCARDED, error_json=err),
        ]))
        assert await s.job_prune(JobPruneParams(completed_age=3600, discarded_age=3600)) == 0
        assert await s.job_prune(JobPruneParams(completed_age=-1, discarded_age=3600)) == 1
        assert await s.job_prune(JobPruneParams(completed_age=-1, discarded_age=-1, limit=1)) == 1
        assert len(await s.job_list(JobListParams())) == 2

    run(app, body)
