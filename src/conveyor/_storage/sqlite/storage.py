"""The embedded backend: one SQLite file in WAL mode, driven by one dedicated thread.

What is shared with every backend comes from BaseStorage; ``SQLiteFile`` (``file.py``)
adds the thread, how a statement runs on it and the schema that migrates itself; this
class adds the batch paths and the calls that run several statements in one
transaction. The sync API's inserts run on a connection of the calling thread (no hop
at all), under the same write lock.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from ..._errors import DatabaseUnavailableError
from ..._job import Job
from ..control_types import (
    ConcurrencyGroup,
    LeaderElectParams,
    LeaderRow,
    RateGrant,
    RateRequest,
)
from ..gcra import gcra
from ..job_types import (
    JobAck,
    JobAckManyParams,
    JobArchiveParams,
    JobFetchAvailableParams,
    JobHeartbeatManyParams,
    JobHeartbeatResult,
    JobInsert,
    JobProgress,
)
from ..lazy_inserts import is_plain
from ..metric_types import MetricRow
from ..rows import claimed_from_seconds, job_from_row, leader_row, sort_for_claim
from ..unique import run_sync, unique_insert
from ..wake import WakeHub
from ..workflow import Steps
from . import batch, fair, workflow
from .connection import SQLiteConfig
from .file import Conn, SQLiteFile
from .retiring import Retiring

#: Jobs moved to history per write transaction: the one writer is held about 2-3 ms by
#: one (about 10 us per job), so claims and acks queued behind it wait no longer than
#: that. The archiver's own batch (5,000, sized for PostgreSQL) is split into these.
ARCHIVE_BATCH = 200


def _insert_values(job: JobInsert) -> dict[str, Any]:
    return {
        "task": job.task, "queue": job.queue, "args": job.args_json, "kwargs": job.kwargs_json,
        "priority": job.priority, "max_attempts": job.max_attempts, "tags": job.tags_json,
        "meta": job.meta_json, "delay": job.delay,
        "run_at": job.run_at.timestamp() if job.run_at is not None else None,
        "unique_key": job.unique_key, "unique_states": job.unique_states,
        "concurrency_key": job.concurrency_key, "requires": job.requires_json,
        "expires_in": job.expires_in,
        "expires_at": job.expires_at.timestamp() if job.expires_at is not None else None,
        "fair_key": job.fair_key,
    }


class SQLiteStorage(SQLiteFile):
    """Storage on one SQLite file. Example: ``SQLiteStorage(SQLiteConfig("jobs.db"), WakeHub())``"""

    def __init__(self, config: SQLiteConfig, hub: WakeHub) -> None:
        super().__init__(config, hub)
        self._retiring = Retiring(self._q, self._thread.write_lock, config.path)

    async def job_archive(self, params: JobArchiveParams) -> int:
        """Up to ``params.limit`` jobs in transactions of ARCHIVE_BATCH, each its own call
        on the thread: what was queued meanwhile (claims, acks) runs between them."""
        moved = 0
        while moved < params.limit:
            size = min(ARCHIVE_BATCH, params.limit - moved)
            done = await super().job_archive(dataclasses.replace(params, limit=size))
            moved += done
            if done < size:
                break
        return moved

    # -- jobs: the batch paths ---------------------------------------------------------------

    def _insert_rows(self, conn: Conn, jobs: Sequence[JobInsert]) -> list[Job]:
        if is_plain(jobs):  # one executemany
            return batch.insert_plain(conn, self._q, jobs).jobs(jobs)

        def run(name: str, values: list[dict[str, Any]]) -> list[Job]:
            found = (conn.execute(self._q[name], v).fetchone() for v in values)
            return [job_from_row(r, json_text=True) for r in found if r is not None]

        return run_sync(unique_insert(
            jobs, lambda batch: [_insert_values(j) for j in batch],
            lambda keys: [{"unique_key": k} for k in keys]), run)

    async def job_insert_many(
        self, jobs: Sequence[JobInsert], connection: Any = None
    ) -> list[Job]:
        if connection is not None:
            return self.job_insert_many_sync(jobs, connection)
        inserted = await self._thread.call_write(lambda c: self._insert_rows(c, jobs))
        self._woke(j.queue for j in inserted)
        return inserted

    def _insert_ids(self, conn: Conn, jobs: Sequence[JobInsert]) -> list[int]:
        if is_plain(jobs):  # no Job built at all
            return list(batch.insert_plain(conn, self._q, jobs).ids)
        return [job.id for job in self._insert_rows(conn, jobs)]

    async def job_insert_ids(self, jobs: Sequence[JobInsert], connection: Any = None
                             ) -> list[int]:
        if connection is not None:
            return [job.id for job in self.job_insert_many_sync(jobs, connection)]
        ids = await self._thread.call_write(lambda c: self._insert_ids(c, jobs))
        self._woke({j.queue for j in jobs})
        return ids

    def job_insert_ids_blocking(self, jobs: Sequence[JobInsert]) -> list[int]:
        if not self._thread.running or self._thread.is_current():
            raise DatabaseUnavailableError("storage is not open")
        with self._callers.connection(self._config.busy_timeout) as conn:
            ids = self._thread.write(conn, lambda c: self._insert_ids(c, jobs))
        self._woke({j.queue for j in jobs})
        return ids

    def job_insert_many_blocking(self, jobs: Sequence[JobInsert]) -> list[Job]:
        if not self._thread.running or self._thread.is_current():
            raise DatabaseUnavailableError("storage is not open")
        with self._callers.connection(self._config.busy_timeout) as conn:
            inserted = self._thread.write(conn, lambda c: self._insert_rows(c, jobs))
        self._woke(j.queue for j in inserted)
        return inserted

    def job_insert_many_sync(self, jobs: Sequence[JobInsert], connection: Any) -> list[Job]:
        if not isinstance(connection, sqlite3.Connection):
            raise TypeError(
                "connection= on the SQLite backend must be a sqlite3.Connection to the same file"
            )
        previous = connection.row_factory
        connection.row_factory = sqlite3.Row
        try:
            return self._insert_rows(connection, jobs)
        finally:
            connection.row_factory = previous

    async def _run_steps(self, steps: Steps, connection: Any) -> Any:
        if connection is None:
            return await self._thread.call_write(
                lambda c: workflow.run_steps(c, self._q, steps))
        return self._run_steps_sync(steps, connection)

    def _run_steps_sync(self, steps: Steps, connection: Any) -> Any:
        if not isinstance(connection, sqlite3.Connection):
            raise TypeError(
                "connection= on the SQLite backend must be a sqlite3.Connection to the same file"
            )
        return workflow.run_steps(connection, self._q, steps)

    async def job_fetch_available(self, params: JobFetchAvailableParams) -> list[Job]:
        values = {"queue": params.queue, "limit": params.limit, "owner": params.owner,
                  "lease_ttl": params.lease_ttl}
        routed = "_routed" if params.routed else ""
        if params.routed:  # a worker with labels or a task filter
            values["labels"] = json.dumps(dict(params.labels or {}))
            values["tasks"] = None if params.tasks is None else json.dumps(list(params.tasks))
        if params.fair:
            keys = self._fair_keys_values(params.queue)
            rows = await self._thread.call_write(lambda c: fair.fair_claim(
                c, self._q, params.limit, values, keys,
                lambda r: self._fair_keys_read(keys, r), routed))
            return claimed_from_seconds(rows, params.owner)  # in turn order
        sql = self._q["job_fetch_available" + routed]
        # decoded here, not on the storage thread: it can start the next statement
        try:
            rows = await self._thread.call_write(lambda c: batch.claim(c, sql, values))
        except batch.UndecodableText:  # rolled back: nothing was claimed
            rows = await self._thread.call_write(
                lambda c: batch.claim(c, sql, values, lenient=True))
        return sort_for_claim(claimed_from_seconds(rows, params.owner))

    async def job_ack_many(self, params: JobAckManyParams) -> list[int]:
        sql = self._q["job_ack"]

        def exact(conn: Conn, acks: Sequence[JobAck]) -> list[int]:
            applied = []
            for ack in acks:
                row = conn.execute(sql, {
                    "id": ack.id, "lease_token": ack.lease_token, "state": ack.state.value,
                    "delay": ack.delay, "result": ack.result_json, "error": ack.error_json,
                    "attempt_delta": ack.attempt_delta, "run_time": ack.run_time,
                    "node": params.node,
                }).fetchone()
                if row is not None:
                    applied.append(row["id"])
                    if row["state"] == "available":
                        self._hub.notify(row["queue"])
            return applied

        plan = batch.plan_acks(params.acks, params.retire)  # here: the thread is busier
        moved: set[int] = set()
        if plan.retire and plan.fast and not plan.rest:  # the usual: one statement
            fast, text = plan.fast, plan.fast_json
            done = await self._thread.call(
                lambda c: self._retiring.move(c, fast, text, params.node))
            if done is not None and len(done) == len(plan.acks):
                self._finished()
                return [a.id for a in plan.acks]
            if done is not None:  # the others stay hot (followers, a unique claim) or
                moved = done      # were fenced off: the update path, without a retire
                plan = batch.plan_acks([a for a in plan.acks if a.id not in moved])

        def run(conn: Conn) -> list[int]:  # plain completions in one statement
            return batch.ack_many(conn, self._q, plan, params.node,
                                  lambda acks: exact(conn, acks))

        applied = set(await self._thread.call_write(run)) | moved
        if applied:  # committed: some may be final (a waiter re-reads to see which)
            self._finished()
        return [a.id for a in params.acks if a.id in applied]

    async def job_heartbeat_many(self, params: JobHeartbeatManyParams) -> JobHeartbeatResult:
        sql = self._q["job_heartbeat"]

        def run(conn: Conn) -> JobHeartbeatResult:
            held, cancel = set(), set()
            for lease in params.leases:
                row = conn.execute(sql, {"id": lease.id, "lease_token": lease.lease_token,
                                         "lease_ttl": params.lease_ttl}).fetchone()
                if row is not None:
                    held.add(row["id"])
                    if row["cancel_requested"]:
                        cancel.add(row["id"])
            return JobHeartbeatResult(frozenset(held), frozenset(cancel))

        return await self._thread.call_write(run)

    async def job_progress_many(self, entries: Sequence[JobProgress]) -> list[int]:
        sql = self._q["job_progress"]

        def run(conn: Conn) -> list[int]:  # one transaction on the writer thread
            applied = []
            for e in entries:
                row = conn.execute(sql, {"id": e.id, "lease_token": e.lease_token,
                                         "progress": e.progress, "message": e.message,
                                         "meta": e.meta_json}).fetchone()
                if row is not None:
                    applied.append(row["id"])
            return applied

        return await self._thread.call_write(run) if entries else []

    # -- several statements in one transaction ------------------------------------------------

    async def leader_elect(self, params: LeaderElectParams) -> LeaderRow | None:
        def run(c: Conn) -> Any:
            c.execute(self._q["leader_elect"], {"node_id": params.node_id, "ttl": params.ttl,
                                                "name": params.name})
            return c.execute(self._q["leader_get"], {"name": params.name}).fetchone()

        row = await self._thread.call_write(run)
        return leader_row(row) if row is not None else None

    async def rate_limit_acquire(self, requests: Sequence[RateRequest]) -> list[RateGrant]:
        """BEGIN IMMEDIATE serialises limit checks across processes sharing the file."""
        def run(c: Conn) -> list[RateGrant]:
            now = c.execute(self._q["clock_now"]).fetchone()["now"]
            grants = []
            for request in requests:
                row = c.execute(self._q["rate_limit_lock"], {"key": request.key}).fetchone()
                granted, tat, wait = gcra(row["tat"] if row else None, now, request)
                if granted:
                    c.execute(self._q["rate_limit_set"], {"key": request.key, "tat": tat})
                grants.append(RateGrant(granted, wait))
            return grants

        return await self._thread.call_write(run)

    async def job_concurrency_acquire(self, groups: Sequence[ConcurrencyGroup]) -> frozenset[int]:
        def run(c: Conn) -> frozenset[int]:
            granted: set[int] = set()
            for group in sorted(groups, key=lambda g: g.key):
                c.execute(self._q["concurrency_lock"], {"key": group.key})
                held = c.execute(self._q["concurrency_count"], {"key": group.key}).fetchone()["n"]
                for job_id, token in group.leases[: max(group.limit - held, 0)]:
                    row = c.execute(
                        self._q["concurrency_grant"], {"id": job_id, "lease_token": token}
                    ).fetchone()
                    if row is not None:
                        granted.add(job_id)
            return frozenset(granted)

        return await self._thread.call_write(run)

    async def metrics_add(self, rows: Sequence[MetricRow]) -> None:
        minute = [{"bucket": r.bucket, "queue": r.queue, "task": r.task, "metric": r.metric,
                   "value": r.value} for r in rows if r.bucket is not None]
        total = [{"queue": r.queue, "task": r.task, "metric": r.metric, "value": r.value}
                 for r in rows if r.bucket is None]

        def run(c: Conn) -> None:
            c.executemany(self._q["metrics_add"], minute)
            c.executemany(self._q["metrics_total_add"], total)

        await self._thread.call_write(run)

    async def metrics_prune(self, before: float) -> int:
        def run(c: Conn) -> int:
            values = {"before": before}
            n = c.execute(self._q["metrics_prune"], values).rowcount
            return n + c.execute(self._q["metrics_depth_prune"], values).rowcount

        return await self._thread.call_write(run)
