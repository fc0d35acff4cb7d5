"""What every backend shares: the Storage methods that are one statement with the same
parameters and the same decoding on any database, written once.

A backend subclasses ``BaseStorage`` and supplies its connection handling through a few
small methods (``_read``, ``_write``, ``_filter_values`` ...: the contract is in
``hooks.py``, which ``BaseStorage`` inherits) and a few class constants, then writes
only what truly differs: opening, migrating, the batch paths (insert, claim, ack,
heartbeat) and the calls that need a transaction of several statements. The
unique-insert merge lives in ``unique.py``, the migration check in ``schema.py``, row
decoding in ``rows.py`` and the testing toolkit's methods in ``toolkit.py``
(inherited), each used by both backends.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, cast

from .._errors import unique_held
from .._job import DISCARDABLE_FROM, FINAL_STATES, RETRYABLE_FROM, Job, JobState, loads
from .control_types import (
    JobPruneParams,
)
from .edit_types import JobEdit, JobEditParams
from .hooks import BackendHooks
from .hooks import Row as Row  # its home is hooks.py; the backends import it from here
from .job_types import (
    FailureGroup,
    JobArchiveParams,
    JobBulkParams,
    JobChanged,
    JobCountCappedParams,
    JobExpireParams,
    JobFailureGroupsParams,
    JobFilter,
    JobListParams,
    JobPurgeBatch,
    JobPurgeCount,
    JobPurgeParams,
    JobQueueDeleteParams,
    JobRescueExpiredParams,
    JobSearchParams,
    RequiresCount,
    StagedJob,
    StateCount,
)
from .rows import ts
from .schema import TableDeadRows


class BaseStorage(BackendHooks):
    """The shared half of a backend; see the module docstring for what a backend adds."""

    # -- jobs ----------------------------------------------------------------------------

    async def job_rescue_expired(self, params: JobRescueExpiredParams) -> list[int]:
        values = {"limit": params.limit, "error": params.error_json, "node_ttl": params.node_ttl}
        ids = [r["id"] for r in await self._write("job_rescue_expired", values)]
        if ids:
            self._woke(["*"])
            self._finished()
        return ids

    async def job_stage_due(self, *, limit: int = 5000) -> list[StagedJob]:
        return await self._stage("job_stage_due", {"limit": limit})

    async def job_get(self, job_id: int) -> Job | None:
        return self._one(await self._read("job_get", {"id": job_id}))

    async def job_list(self, params: JobListParams) -> list[Job]:
        values = dataclasses.asdict(params)
        values["state"] = params.state.value if params.state else None
        return self._jobs(await self._read("job_list", values))

    async def job_retry(self, job_id: int) -> Job | None:
        """In the hot table, else moved back from history with its id and retried in the
        same transaction. A job the archiver is moving right now is locked by it: the
        hot update then finds no row, and the history step (a new snapshot) finds it."""
        try:
            job = self._one(await self._write("job_retry", {"id": job_id}))
            if job is None:
                job = self._one((await self._move(
                    "job_history_pick", (*_RESTORE, "job_retry"),
                    {"id": job_id, **self._ids([job_id])}))[1])
        except self.unique_violation:  # the unique index: another live job holds the key
            raise unique_held(job_id) from None
        if job is not None:
            self._woke([job.queue])
        return job

    async def job_retry_edited(self, params: JobEditParams) -> Job | None:
        """``job_retry`` with new arguments: the edit recorded (with the arguments it
        replaced), the arguments replaced and the job retried, in one transaction. A
        finished job in history is moved back first (as ``job_retry``'s history step)."""
        job_id = params.job_id
        values = {"id": job_id, "args": params.args_json, "kwargs": params.kwargs_json,
                  "source": params.source, "actor": params.actor}
        try:
            for _ in range(2):
                picked, rows = await self._move("job_edit_pick", _EDIT, values)
                if picked:
                    job = self._one(rows)
                    if job is not None:
                        self._woke([job.queue])
                    return job
                moved, _ = await self._move("job_history_pick", _RESTORE,
                                            {"id": job_id, **self._ids([job_id])})
                if not moved:
                    return None
        except self.unique_violation:  # the unique index: another live job holds the key
            raise unique_held(job_id) from None
        return None

    async def job_edit_list(self, job_id: int) -> list[JobEdit]:
        rows = await self._read("job_edit_list", {"id": job_id})
        return [JobEdit(cast(datetime, ts(r["at"])), r["source"], r["actor"],
                        loads(r["args_before"]) or [], loads(r["kwargs_before"]) or {},
                        loads(r["args"]) or [], loads(r["kwargs"]) or {}) for r in rows]

    async def job_cancel(self, job_id: int) -> Job | None:
        job = self._one(await self._write("job_cancel", {"id": job_id}))
        if job is not None and job.state.is_final:
            self._finished()
        return job

    async def job_count_by_state(self, *, queue: str | None = None) -> dict[str, int]:
        rows = await self._read("job_count_by_state", {"queue": queue})
        return {r["state"]: int(r["n"]) for r in rows}

    async def job_count_ahead(self, job_id: int) -> int:
        return int((await self._read("job_count_ahead", {"id": job_id}))[0]["n"])

    async def job_prune(self, params: JobPruneParams) -> int:
        """One batch from each table: hot keeps finished rows that hold a unique claim
        (or wait for the archiver), history the rest."""
        values = {
            "completed_age": params.completed_age, "discarded_age": params.discarded_age,
            "limit": params.limit, "queue": params.queue,
            "exclude": json.dumps(list(params.exclude_queues)),
        }
        deleted = len(await self._write("job_prune", values))
        deleted += len(await self._write("job_history_prune", values))
        await self._write("node_prune", {"age": params.node_age})
        await self._write("rate_limit_prune", {"age": params.node_age})
        await self._write("limiter_slot_prune", {})
        await self._write("job_edit_prune", {"limit": params.limit})
        return deleted

    # -- maintenance: delete one job, purge many (<dialect>/sql/maintenance.sql) ---------

    async def job_delete(self, job_id: int, *, force: bool = False) -> Job | None:
        job = self._one(await self._write("job_delete", {"id": job_id, "force": force}))
        if job is None:  # finished and archived (history holds no running job)
            job = self._one(await self._write("job_history_delete", self._ids([job_id])))
        return job

    async def job_delete_by_queue(self, params: JobQueueDeleteParams) -> JobPurgeBatch:
        """As a purge batch: pick with a read, then delete from each table in a short
        write of its own (a job the archiver moves meanwhile is found in history)."""
        values = {"queue": params.queue, "after_id": params.after_id, "limit": params.limit}
        picked = [int(r["id"]) for r in await self._read("job_queue_pick", values)]
        if not picked:
            return JobPurgeBatch([], None)
        rows = await self._write("job_queue_delete_ids",
                                 {**self._ids(picked), "queue": params.queue})
        hot = {int(r["id"]) for r in rows}
        if left := [i for i in picked if i not in hot]:  # in history (or just moved there)
            rows += await self._write("job_history_delete", self._ids(left))
        deleted = changed_jobs(rows, {int(r["id"]) for r in rows})
        return JobPurgeBatch(deleted, picked[-1] if len(picked) == params.limit else None)

    def _purge_values(self, params: JobPurgeParams) -> dict[str, Any]:
        flt = self._filter_values(JobFilter(states=params.states))
        return {"states": flt["states"], "queue": params.queue, "task": params.task,
                "older_than": params.older_than, "after_id": params.after_id,
                "max_id": params.max_id, "limit": params.limit}

    async def job_purge_count(self, params: JobPurgeParams) -> JobPurgeCount:
        rows = await self._read("job_purge_count", self._purge_values(params))
        ids = [int(r["max_id"]) for r in rows if r["max_id"] is not None]
        return JobPurgeCount({JobState(r["state"]): int(r["n"]) for r in rows},
                             max(ids) if ids else None)

    async def job_purge_batch(self, params: JobPurgeParams) -> JobPurgeBatch:
        """Pick up to ``limit`` candidates with a read, then delete those that still
        match in one short write: no write lock is held while the table is read."""
        values = self._purge_values(params)
        picked = [int(r["id"]) for r in await self._read("job_purge_pick", values)]
        if not picked:
            return JobPurgeBatch([], None)
        values["ids"] = self._filter_values(JobFilter(ids=tuple(picked)))["ids"]
        rows = await self._write("job_purge_ids", values)
        rows += await self._write("job_history_purge_ids", values)
        deleted = changed_jobs(rows, {int(r["id"]) for r in rows})
        return JobPurgeBatch(deleted, picked[-1] if len(picked) == params.limit else None)

    async def job_prune_count(self, params: JobPruneParams) -> int:
        values = {"completed_age": params.completed_age, "discarded_age": params.discarded_age,
                  "queue": params.queue, "exclude": json.dumps(list(params.exclude_queues))}
        return int((await self._read("job_prune_count", values))[0]["n"])

    async def job_rescue_candidates(self, params: JobRescueExpiredParams) -> list[Job]:
        rows = await self._read("job_rescue_candidates",
                                {"limit": params.limit, "node_ttl": params.node_ttl})
        return sorted(self._jobs(rows), key=lambda j: j.id)

    # -- search and bulk actions -----------------------------------------------------------

    async def job_search(self, params: JobSearchParams) -> list[Job]:
        values = {**self._filter_values(params.filter), "limit": params.limit,
                  "before_id": params.before_id, "after_id": params.after_id}
        newer = params.after_id is not None
        jobs = self._jobs(await self._read("job_search_newer" if newer else "job_search", values))
        return jobs[::-1] if newer else jobs

    async def job_count_capped(self, params: JobCountCappedParams) -> int:
        values = {**self._filter_values(params.filter), "cap": params.cap}
        return int((await self._read("job_count_capped", values))[0]["n"])

    async def job_count_by_queue(self, *, final_cap: int = 100_000) -> list[StateCount]:
        active = await self._read("job_count_by_queue", {})
        final = await self._read("job_count_final_capped", {"cap": final_cap})
        counts = [StateCount(r["queue"], JobState(r["state"]), int(r["n"])) for r in active]
        counts += [StateCount(None, JobState(r["state"]), int(r["n"]),
                              int(r["n"]) >= final_cap) for r in final]
        return counts

    async def job_count_requiring(self, *, limit: int = 1000) -> list[RequiresCount]:
        rows = await self._read("job_count_requiring", {"limit": limit})
        return [RequiresCount(r["queue"], self._decoded(r["requires"]), int(r["n"]))
                for r in rows]

    def _decoded(self, value: Any) -> Any:
        return loads(value, {}) if self.json_text else value

    async def job_count_final_by_queue(self) -> list[StateCount]:
        rows = await self._read("job_count_final_by_queue", {})
        return [StateCount(r["queue"], JobState(r["state"]), int(r["n"])) for r in rows]

    async def job_failure_groups(self, params: JobFailureGroupsParams) -> list[FailureGroup]:
        values = {"queue": params.queue, "task": params.task, "limit": params.limit,
                  "scan": params.scan}
        return [
            FailureGroup(r["task"], r["error"], int(r["retryable"]), int(r["discarded"]),
                         int(r["last_id"]), ts(r["last_at"]))
            for r in await self._read("job_failure_groups", values)
        ]

    async def job_retry_matching(self, params: JobBulkParams) -> list[JobChanged]:
        changed = await self._change_matching(params, RETRYABLE_FROM, "job_retry_ids", {})
        if len(changed) < params.limit:  # then finished jobs in history, moved back
            values = {**self._filter_values(params.filter), "limit": params.limit - len(changed),
                      "allowed": self._filter_values(JobFilter(states=_FINAL))["states"]}
            picked, done = await self._move("job_history_pick_matching",
                                            (*_RESTORE, "job_retry_ids"), values)
            changed += changed_jobs(picked, {r["id"] for r in done})
        self._woke(c.queue for c in changed)
        return changed

    async def job_discard_matching(self, params: JobBulkParams) -> list[JobChanged]:
        changed = await self._change_matching(params, DISCARDABLE_FROM, "job_discard_ids",
                                              {"error": params.error_json})
        if changed:
            self._finished()
        return changed

    async def job_expire(self, params: JobExpireParams) -> list[JobChanged]:
        picked, done = await self._move("job_expire_pick", ("job_expire_ids",),
                                        {"limit": params.limit, "error": params.error_json})
        changed = changed_jobs(picked, {r["id"] for r in done})
        if changed:
            self._finished()
        return changed

    async def table_dead_rows(self) -> list[TableDeadRows]:
        return [TableDeadRows(r["name"], int(r["dead"]), int(r["live"]), bool(r["owned"]))
                for r in await self._read("table_dead_rows", {})]

    async def table_vacuum(self, name: str) -> None:
        """Nothing here: only a dialect that lists dead rows (PostgreSQL) overrides it."""
        return None

    async def job_count_running_by_node(self) -> dict[str, int]:
        rows = await self._read("job_count_running_by_node", {})
        return {r["node"]: int(r["n"]) for r in rows if r["node"] is not None}

    # -- history (<dialect>/sql/history.sql) -------------------------------------------------

    def _ids(self, ids: Sequence[int]) -> dict[str, Any]:
        return {"ids": self._filter_values(JobFilter(ids=tuple(ids)))["ids"]}

    async def job_archive(self, params: JobArchiveParams) -> int:
        picked, _ = await self._move("job_archive_pick", ("job_archive_copy", "job_archive_delete"),
                                     {"after": params.after, "limit": params.limit})
        return len(picked)

    async def job_history_prepare(self, days: int) -> int:
        return int((await self._write("job_history_prepare", {"days": days}))[0]["n"])

    async def job_history_drop(self, params: JobPruneParams) -> int:
        rows = await self._write("job_history_drop", {"completed_age": params.completed_age,
                                                      "discarded_age": params.discarded_age})
        return int(rows[0]["n"]) if rows else 0


#: Moving jobs back from history to the hot table, after a pick: copy, then delete.
_RESTORE = ("job_history_restore", "job_history_delete")
#: Edit and retry, after job_edit_pick: record, replace, retry (the job's row comes back).
_EDIT = ("job_edit_record", "job_edit_apply", "job_retry")
#: The states history holds.
_FINAL = tuple(sorted(FINAL_STATES))



def changed_jobs(picked: Iterable[Row], done: set[int]) -> list[JobChanged]:
    """The picked rows a bulk update changed, with the state each left."""
    return [JobChanged(r["id"], r["task"], r["queue"], r["attempt"], JobState(r["state"]))
            for r in picked if r["id"] in done]
