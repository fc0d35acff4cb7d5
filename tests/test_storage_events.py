"""Every storage method that changes a job's state (or deletes it) emits its state change.

``ObservedStorage`` (``_observed.py``) is the one choke point that turns writes into
``app.on_state_change`` events; a writing method it does not wrap passes straight
through and emits nothing. So every member of the ``Storage`` protocol is classified
here, and a new member fails ``test_every_protocol_member_is_classified`` until it is:

- ``EMITTING``: changes a job's state or deletes it; each is called through the app's
  storage on both backends and must emit one event per job it changed.
- ``SILENT_WRITES``: writes, but no job's state (or not yet persisted), with the reason.
- ``NO_JOB_WRITES``: reads, connection handling, and writes to tables other than jobs.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from conveyor import Conveyor, JobState, StateChange
from conveyor._storage import (
    JobAck,
    JobAckManyParams,
    JobBulkParams,
    JobClaimOneParams,
    JobEditParams,
    JobExpireParams,
    JobFetchAvailableParams,
    JobFilter,
    JobInsert,
    JobPurgeParams,
    JobQueueDeleteParams,
    JobRescueExpiredParams,
    Storage,
    WorkflowInsertParams,
    WorkflowNode,
)

#: (the view under test, the raw storage for setting up without events)
Scenario = Callable[[Any, Storage], Awaitable[set[int]]]

SILENT_WRITES: dict[str, str] = {
    "job_insert_many_sync": "inserts in the caller's open transaction: nothing persisted yet",
    "compose_sync": "inserts in the caller's open transaction: nothing persisted yet",
    "job_heartbeat_many": "extends leases; the jobs stay running",
    "job_progress_many": "writes a running job's progress; it stays running",
    "job_concurrency_acquire": "grants running jobs their slots; they stay running",
    "job_archive": "moves finished jobs to history, unchanged and still readable",
    "job_prune": "retention: deletes long-finished jobs without events (StateChange docs)",
    "job_history_drop": "retention: drops history's old days without events",
    "batch_close": "the batch's row; callbacks its finish releases are settled by the "
                   "database's triggers, as every release a final state causes (compose)",
}

NO_JOB_WRITES = frozenset({
    "job_edit_list", "job_count_requiring", "fair_key_list", "fair_weight_set", "job_fair_pending",
    "fair_key_prune",  # forgets idle fair keys: their own table, no job
    # connection, schema, capabilities, subscriptions
    "capabilities", "open", "close", "schema_pending", "migrate", "db_health",
    "wake_subscribe", "finish_subscribe", "table_dead_rows", "table_vacuum",
    "job_history_prepare",  # makes history's day partitions
    # the testing toolkit's clock
    "virtual_clock", "use_virtual_clock", "clock_join", "clock_set", "clock_now",
    # cluster tables: queues, nodes, leadership, schedules, limits, cool-downs
    "queue_list", "queue_update", "node_upsert", "node_delete", "node_list",
    "leader_elect", "leader_get", "leader_resign", "schedule_upsert", "schedule_list",
    "schedule_set_paused", "schedule_advance", "schedule_delete", "rate_limit_acquire",
    "rate_limit_get", "job_concurrency_holders", "queue_cooldown_raise",
    "queue_cooldown_list", "queue_cooldown_clear",
    # limiters: their own tables, no job
    "limiter_declare", "limiter_slot_acquire", "limiter_slot_renew", "limiter_slot_release",
    "limiter_list",
    # metrics
    "metrics_add", "metrics_series", "metrics_totals", "metrics_depth_sample",
    "metrics_depth_series", "metrics_prune",
    # reads of jobs, batches and workflows
    "job_get", "job_list", "job_count_by_state", "job_count_ahead", "job_purge_count",
    "job_prune_count", "job_rescue_candidates", "job_search", "job_count_capped",
    "job_count_by_queue", "job_count_final_by_queue", "job_failure_groups",
    "job_count_running_by_node", "batch_get", "workflow_jobs", "batch_jobs",
    "workflow_edges", "job_dependencies", "batch_waited_on",
})


def ins(queue: str = "q", delay: float | None = None) -> JobInsert:
    return JobInsert(task="t", queue=queue, args_json="[]", kwargs_json="{}", priority=0,
                     max_attempts=3, tags_json="[]", meta_json="{}", delay=delay)


def fetch(ttl: float = 30.0) -> JobFetchAvailableParams:
    return JobFetchAvailableParams(queue="q", limit=10, owner="node-a", lease_ttl=ttl)


async def running(raw: Storage, ttl: float = 30.0) -> list[Any]:
    await raw.job_insert_many([ins(), ins()])
    return await raw.job_fetch_available(fetch(ttl))


async def finished(raw: Storage, state: JobState, delay: float | None = None) -> set[int]:
    jobs = await running(raw)
    acks = [JobAck(j.id, j.lease_token or 0, state, delay=delay) for j in jobs]
    await raw.job_ack_many(JobAckManyParams(acks))
    return {j.id for j in jobs}


async def _insert_many(s: Any, raw: Storage) -> set[int]:
    return {j.id for j in await s.job_insert_many([ins(), ins()])}


async def _insert_ids(s: Any, raw: Storage) -> set[int]:
    return set(await s.job_insert_ids([ins(), ins()]))


async def _insert_many_blocking(s: Any, raw: Storage) -> set[int]:
    return {j.id for j in await asyncio.to_thread(s.job_insert_many_blocking, [ins(), ins()])}


async def _insert_ids_blocking(s: Any, raw: Storage) -> set[int]:
    return set(await asyncio.to_thread(s.job_insert_ids_blocking, [ins(), ins()]))


async def _compose(s: Any, raw: Storage) -> set[int]:
    params = WorkflowInsertParams([WorkflowNode(ins()), WorkflowNode(ins())])
    return {j.id for j in (await s.compose(params)).jobs}


async def _fetch_available(s: Any, raw: Storage) -> set[int]:
    await raw.job_insert_many([ins(), ins()])
    return {j.id for j in await s.job_fetch_available(fetch())}


async def _claim_one(s: Any, raw: Storage) -> set[int]:
    (job,) = await raw.job_insert_many([ins()])
    claimed = await s.job_claim_one(JobClaimOneParams(job.id, "node-a"))
    return {claimed.id}


async def _ack_many(s: Any, raw: Storage) -> set[int]:
    await raw.job_insert_many([ins(), ins()])
    jobs = await s.job_fetch_available(fetch())  # claimed through the view: it knows them
    s.events.clear()
    acks = [JobAck(j.id, j.lease_token or 0, JobState.COMPLETED) for j in jobs]
    return set(await s.job_ack_many(JobAckManyParams(acks)))


async def _rescue_expired(s: Any, raw: Storage) -> set[int]:
    jobs = await running(raw, ttl=-60.0)  # leases that ran out a minute ago
    rescued = set(await s.job_rescue_expired(JobRescueExpiredParams()))
    assert rescued == {j.id for j in jobs}
    return rescued


async def _stage_due(s: Any, raw: Storage) -> set[int]:
    ids = await finished(raw, JobState.RETRYABLE, delay=0.0)
    staged = {j.id for j in await s.job_stage_due()}
    assert staged == ids
    return staged


async def _stage_early(s: Any, raw: Storage) -> set[int]:
    await raw.job_insert_many([ins(delay=3600.0), ins(delay=3600.0)])
    return {j.id for j in await s.job_stage_early()}


async def _retry(s: Any, raw: Storage) -> set[int]:
    job_id = min(await finished(raw, JobState.DISCARDED))
    return {(await s.job_retry(job_id)).id}


async def _retry_edited(s: Any, raw: Storage) -> set[int]:
    job_id = min(await finished(raw, JobState.DISCARDED))
    return {(await s.job_retry_edited(JobEditParams(job_id, "[1]", "{}", "test"))).id}


async def _cancel(s: Any, raw: Storage) -> set[int]:
    (job,) = await raw.job_insert_many([ins()])
    return {(await s.job_cancel(job.id)).id}


async def _retry_matching(s: Any, raw: Storage) -> set[int]:
    ids = await finished(raw, JobState.DISCARDED)
    changed = await s.job_retry_matching(JobBulkParams(JobFilter(ids=tuple(ids))))
    return {c.id for c in changed}


async def _discard_matching(s: Any, raw: Storage) -> set[int]:
    jobs = await raw.job_insert_many([ins(), ins()])
    changed = await s.job_discard_matching(JobBulkParams(JobFilter(ids=tuple(j.id for j in jobs))))
    return {c.id for c in changed}


async def _expire(s: Any, raw: Storage) -> set[int]:
    past = datetime.now(UTC) - timedelta(minutes=1)
    jobs = await raw.job_insert_many([dataclasses.replace(ins(), expires_at=past),
                                      dataclasses.replace(ins(delay=60.0), expires_at=past),
                                      ins()])
    changed = await s.job_expire(JobExpireParams())
    assert {c.id for c in changed} == {j.id for j in jobs[:2]}
    return {c.id for c in changed}


async def _delete(s: Any, raw: Storage) -> set[int]:
    (job,) = await raw.job_insert_many([ins()])
    return {(await s.job_delete(job.id)).id}


async def _purge_batch(s: Any, raw: Storage) -> set[int]:
    await finished(raw, JobState.COMPLETED)
    batch = await s.job_purge_batch(JobPurgeParams(states=(JobState.COMPLETED,), queue="q"))
    return {c.id for c in batch.deleted}


async def _delete_by_queue(s: Any, raw: Storage) -> set[int]:
    await running(raw)
    await raw.job_insert_many([ins(), ins(delay=60.0)])
    batch = await s.job_delete_by_queue(JobQueueDeleteParams("q"))
    assert len(batch.deleted) == 4
    return {c.id for c in batch.deleted}


#: Each method that changes a job's state or deletes it, and how it is made to.
EMITTING: dict[str, Scenario] = {
    "job_insert_many": _insert_many,
    "job_insert_ids": _insert_ids,
    "job_insert_many_blocking": _insert_many_blocking,
    "job_insert_ids_blocking": _insert_ids_blocking,
    "compose": _compose,
    "job_fetch_available": _fetch_available,
    "job_claim_one": _claim_one,
    "job_ack_many": _ack_many,
    "job_rescue_expired": _rescue_expired,
    "job_stage_due": _stage_due,
    "job_stage_early": _stage_early,
    "job_retry": _retry,
    "job_retry_edited": _retry_edited,
    "job_cancel": _cancel,
    "job_retry_matching": _retry_matching,
    "job_discard_matching": _discard_matching,
    "job_expire": _expire,
    "job_delete": _delete,
    "job_purge_batch": _purge_batch,
    "job_delete_by_queue": _delete_by_queue,
}


def test_every_protocol_member_is_classified() -> None:
    """A new storage method must be put in one of the three groups (and, if it changes a
    job's state, be wrapped by ObservedStorage and get a scenario here)."""
    members = {name for name in vars(Storage) if not name.startswith("_")}
    groups = [set(EMITTING), set(SILENT_WRITES), set(NO_JOB_WRITES)]
    assert sum(len(g) for g in groups) == len(set().union(*groups)), "a name in two groups"
    assert set().union(*groups) == members


class _View:
    """The app's storage view for source "test", and the events emitted meanwhile."""

    def __init__(self, view: Storage, events: list[StateChange]) -> None:
        self.view, self.events = view, events

    def __getattr__(self, name: str) -> Any:
        return getattr(self.view, name)


@pytest.mark.parametrize("method", sorted(EMITTING))
def test_each_state_changing_method_emits_one_event_per_job(app: Conveyor, method: str) -> None:
    events: list[StateChange] = []
    app.on_state_change(events.append)

    async def main() -> tuple[set[int], list[StateChange]]:
        try:
            view = await app.storage_for("test")
            raw: Storage = view.inner  # type: ignore[attr-defined]
            s = _View(view, events)
            changed = await EMITTING[method](s, raw)
            # Only the call under test emits: the setup wrote through the raw storage.
            return changed, list(events)
        finally:
            await app.close_async()

    changed, emitted = asyncio.run(main())
    assert changed, f"{method}: the scenario changed no job"
    assert sorted(e.job_id for e in emitted) == sorted(changed), method
    assert {e.source for e in emitted} == {"test"}
    if method in ("job_delete", "job_purge_batch", "job_delete_by_queue"):
        assert all(e.deleted for e in emitted)
