"""The PostgreSQL backend's statements: the batch paths (column arrays, COPY, tuple rows)
and the calls that need one transaction of several statements (they lock what they
count, so any number of processes together never exceed a limit). The pools, the
statement runner and the lifecycle are ``PostgresPools`` (pools.py); what every backend
shares comes from ``CompositionStorage`` and the classes below it. Postgres never
migrates on open: changing a shared schema is an operator's decision, made with
``conveyor migrate`` (``schema.py``).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

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
    JobFetchAvailableParams,
    JobHeartbeatManyParams,
    JobHeartbeatResult,
    JobInsert,
    JobProgress,
)
from ..lazy_inserts import is_plain
from ..limiter_types import LimiterSlotParams
from ..metric_types import MetricRow
from ..rows import claimed_from_datetimes, job_from_row, leader_row, sort_for_claim
from ..unique import run_async, run_sync, unique_insert
from ..workflow import Steps
from . import batch, fair, workflow
from .connection import CALLER_PREPARE
from .copy_insert import Inserted
from .pools import PostgresPools

_ACK_COLUMNS = (
    ("id", "id"), ("lease_token", "lease_token"),
    ("result", "result_json"), ("error", "error_json"), ("attempt_delta", "attempt_delta"),
)

#: What ``table_vacuum`` accepts: one of Conveyor's own tables, never another name.
_CONVEYOR_TABLE = re.compile(r"conveyor_[a-z0-9_]{1,50}")


def _floats(values: Iterable[float | None]) -> list[float | None]:
    """psycopg refuses to dump a list mixing int and float (``delay=60`` next to 0.5)."""
    return [None if v is None else float(v) for v in values]


#: A batch the plain paths take: not empty, and no unique key to check.
_plain = is_plain


class PostgresStorage(PostgresPools):
    """Storage on PostgreSQL. Example: ``PostgresStorage(PostgresConfig(url), WakeHub())``"""

    # -- jobs: the batch paths ---------------------------------------------------------------

    def _insert_values(self, jobs: Sequence[JobInsert]) -> dict[str, Any]:
        values = batch.insert_values(jobs, self._config.channel)
        values["fair_key"] = [j.fair_key for j in jobs]  # job_insert's alone (not plain)
        return values

    @staticmethod
    def _keys(keys: list[str]) -> dict[str, Any]:
        return {"unique_keys": keys}

    async def _insert_plain(self, jobs: Sequence[JobInsert],
                            connection: psycopg.AsyncConnection[Any] | None,
                            jobs_too: bool = False) -> Inserted:
        """A batch without unique keys, on the caller's connection or a pooled one."""
        if connection is not None:
            with self._errors.translate():
                return await batch.insert_plain(connection, self._q, jobs, self._config.channel,
                                                CALLER_PREPARE, jobs_too)
        async with self._conn() as conn:
            return await batch.insert_plain(conn, self._q, jobs, self._config.channel,
                                            jobs_too=jobs_too)

    async def job_insert_many(
        self, jobs: Sequence[JobInsert], connection: Any = None
    ) -> list[Job]:
        if connection is not None and not isinstance(connection, psycopg.AsyncConnection):
            return self.job_insert_many_sync(jobs, connection)
        if _plain(jobs):
            inserted = batch.jobs_of(jobs, await self._insert_plain(jobs, connection, True))
            if connection is None:
                self._woke(j.queue for j in inserted)
            return inserted

        async def run(name: str, values: Mapping[str, Any]) -> list[Job]:
            if connection is None:
                rows = await self._fetch(name, values)
            else:  # the caller's connection and transaction; its rows may not be dicts
                with self._errors.translate():
                    async with connection.cursor(row_factory=dict_row) as cur:
                        await cur.execute(self._q[name], values, prepare=CALLER_PREPARE)
                        rows = await cur.fetchall()
            return [job_from_row(r, json_text=False) for r in rows]

        inserted = await run_async(unique_insert(jobs, self._insert_values, self._keys), run)
        if connection is None:
            self._woke(j.queue for j in inserted)
        return inserted

    async def job_insert_ids(self, jobs: Sequence[JobInsert], connection: Any = None
                             ) -> list[int]:
        if _plain(jobs) and (connection is None
                             or isinstance(connection, psycopg.AsyncConnection)):
            ids = (await self._insert_plain(jobs, connection)).ids
            if connection is None:
                self._woke(j.queue for j in jobs)
            return ids
        return [j.id for j in await self.job_insert_many(jobs, connection)]

    def job_insert_many_blocking(self, jobs: Sequence[JobInsert]) -> list[Job]:
        inserted = self._insert_blocking(jobs)
        self._woke(j.queue for j in inserted)  # only when polling (no LISTEN)
        return inserted

    def _insert_blocking(self, jobs: Sequence[JobInsert]) -> list[Job]:
        if self._pool is None:
            raise DatabaseUnavailableError("storage is not open")
        with self._errors.translate(), \
                self._blocking.connection(self._config.connect_timeout) as conn:
            return self._insert_sync(jobs, conn, None)

    def job_insert_ids_blocking(self, jobs: Sequence[JobInsert]) -> list[int]:
        if self._pool is None or not _plain(jobs):
            return [j.id for j in self.job_insert_many_blocking(jobs)]
        with self._errors.translate(), \
                self._blocking.connection(self._config.connect_timeout) as conn:
            ids = batch.insert_plain_sync(conn, self._q, jobs, self._config.channel).ids
        self._woke(j.queue for j in jobs)  # only when polling (no LISTEN)
        return ids

    def job_insert_many_sync(self, jobs: Sequence[JobInsert], connection: Any) -> list[Job]:
        if not isinstance(connection, psycopg.Connection):
            raise TypeError(
                "connection= on the PostgreSQL backend must be a psycopg (3) Connection or "
                f"AsyncConnection to the same database, not {type(connection).__name__}"
            )
        return self._insert_sync(jobs, connection, CALLER_PREPARE)

    def _insert_sync(self, jobs: Sequence[JobInsert], connection: psycopg.Connection[Any],
                     prepare: bool | None) -> list[Job]:
        """On a caller's connection (``prepare=False``) or a blocking one of our own."""
        if _plain(jobs):
            with self._errors.translate():
                return batch.jobs_of(jobs, batch.insert_plain_sync(
                    connection, self._q, jobs, self._config.channel, prepare, jobs_too=True))

        def run(name: str, values: Mapping[str, Any]) -> list[Job]:
            with self._errors.translate(), connection.cursor(row_factory=dict_row) as cur:
                cur.execute(self._q[name], values, prepare=prepare)
                return [job_from_row(r, json_text=False) for r in cur.fetchall()]

        return run_sync(unique_insert(jobs, self._insert_values, self._keys), run)

    async def _run_steps(self, steps: Steps, connection: Any) -> Any:
        if connection is None:
            async with self._transaction() as conn:
                return await workflow.run_steps(conn, self._q, self._config.channel, steps)
        if not isinstance(connection, psycopg.AsyncConnection):
            return self._run_steps_sync(steps, connection)
        with self._errors.translate():
            return await workflow.run_steps(connection, self._q, self._config.channel, steps,
                                            CALLER_PREPARE)

    def _run_steps_sync(self, steps: Steps, connection: Any) -> Any:
        with self._errors.translate():
            return workflow.run_steps_sync(connection, self._q, self._config.channel, steps)

    async def job_fetch_available(self, params: JobFetchAvailableParams) -> list[Job]:
        values = {"queue": params.queue, "limit": params.limit, "owner": params.owner,
                  "lease_ttl": params.lease_ttl}
        routed = "_routed" if params.routed else ""
        if params.routed:  # a worker with labels or a task filter
            values["labels"] = json.dumps(dict(params.labels or {}))
            values["tasks"] = None if params.tasks is None else list(params.tasks)
        if params.fair:
            return await self._fair_claim(params, values, routed)
        async with self._conn() as conn:  # tuple rows: no dict per claimed job
            jobs = await batch.claim(conn, self._q["job_fetch_available" + routed], values)
        return sort_for_claim(jobs)

    async def _fair_claim(self, params: JobFetchAvailableParams, values: dict[str, Any],
                          routed: str) -> list[Job]:
        keys = self._fair_keys_values(params.queue)
        async with self._conn() as conn:
            rows = await fair.fair_claim(conn, self._q, params.limit, values, keys,
                                         lambda r: self._fair_keys_read(keys, r), routed)
        return claimed_from_datetimes(rows, params.owner)  # in turn order

    async def job_ack_many(self, params: JobAckManyParams) -> list[int]:
        # One UPDATE cannot apply two acks to one row; SQLite applies them in turn, where
        # only the first with the live token can win, so keep the first per (id, token).
        acks: dict[tuple[int, int], JobAck] = {}
        for ack in params.acks:
            acks.setdefault((ack.id, ack.lease_token), ack)
        if not acks:
            return []
        unique = list(acks.values())

        async def general(rest: Sequence[JobAck]) -> set[int]:
            values: dict[str, Any] = {col: [getattr(x, a) for x in rest] for col, a in _ACK_COLUMNS}
            values["state"] = [a.state.value for a in rest]
            values["delay"] = _floats(a.delay for a in rest)
            values.update(run_time=_floats(a.run_time for a in rest), node=params.node)
            return {r["id"] for r in await self._fetch("job_ack", values)}

        # plain completions go through the narrower job_ack_completed
        applied = await batch.ack_many(self._fetch, unique, params.node, general,
                                       params.retire)
        return list(dict.fromkeys(a.id for a in unique if a.id in applied))

    async def job_heartbeat_many(self, params: JobHeartbeatManyParams) -> JobHeartbeatResult:
        leases = params.leases
        values = {"id": [x.id for x in leases], "lease_token": [x.lease_token for x in leases],
                  "lease_ttl": params.lease_ttl}
        rows = await self._fetch("job_heartbeat", values) if leases else []
        return JobHeartbeatResult(
            frozenset(r["id"] for r in rows),
            frozenset(r["id"] for r in rows if r["cancel_requested"]),
        )

    async def job_progress_many(self, entries: Sequence[JobProgress]) -> list[int]:
        if not entries:
            return []
        values = {"id": [e.id for e in entries], "lease_token": [e.lease_token for e in entries],
                  "progress": _floats(e.progress for e in entries),
                  "message": [e.message for e in entries],
                  "meta": [e.meta_json for e in entries]}
        return [r["id"] for r in await self._fetch("job_progress", values)]

    # -- several statements in one transaction ------------------------------------------------

    async def leader_elect(self, params: LeaderElectParams) -> LeaderRow | None:
        # Reserved connections: handlers hogging the pool must not cost the leadership.
        async with self._transaction(reserved=True) as conn:
            await self._fetch("leader_elect", dataclasses.asdict(params), conn)
            rows = await self._fetch("leader_get", {"name": params.name}, conn)
        return leader_row(rows[0]) if rows else None

    async def rate_limit_acquire(self, requests: Sequence[RateRequest]) -> list[RateGrant]:
        """A row lock on each rate budget, taken in key order: two processes never wait
        on each other's keys in a cycle."""
        grants: dict[int, RateGrant] = {}
        async with self._transaction() as conn:
            now = (await self._fetch("clock_now", {}, conn))[0]["now"].timestamp()
            order = sorted(range(len(requests)), key=lambda i: requests[i].key)
            for i in order:
                request = requests[i]
                tat = (await self._fetch("rate_limit_lock", {"key": request.key}, conn))[0]["tat"]
                granted, new_tat, wait = gcra(tat, now, request)
                if granted:
                    await self._fetch("rate_limit_set", {"key": request.key, "tat": new_tat}, conn)
                grants[i] = RateGrant(granted, wait)
        return [grants[i] for i in range(len(requests))]

    async def limiter_slot_acquire(self, params: LimiterSlotParams) -> bool:
        """An advisory lock per (name, key), then the count and the insert it allows."""
        values = {"name": params.name, "key": params.key, "holder": params.holder,
                  "limit": params.limit, "lease": float(params.lease)}
        async with self._transaction() as conn:
            await self._fetch("limiter_slot_lock", values, conn)
            return bool(await self._fetch("limiter_slot_take", values, conn))

    async def job_concurrency_acquire(self, groups: Sequence[ConcurrencyGroup]) -> frozenset[int]:
        """An advisory lock per concurrency key, taken in key order."""
        granted: set[int] = set()
        async with self._transaction() as conn:
            for group in sorted(groups, key=lambda g: g.key):
                await self._fetch("concurrency_lock", {"key": group.key}, conn)
                held = (await self._fetch("concurrency_count", {"key": group.key}, conn))[0]["n"]
                for job_id, token in group.leases[: max(group.limit - held, 0)]:
                    rows = await self._fetch(
                        "concurrency_grant", {"id": job_id, "lease_token": token}, conn)
                    granted.update(r["id"] for r in rows)
        return frozenset(granted)

    async def metrics_add(self, rows: Sequence[MetricRow]) -> None:
        minute = [r for r in rows if r.bucket is not None]
        total = [r for r in rows if r.bucket is None]
        async with self._transaction() as conn:
            if minute:
                await conn.execute(self._q["metrics_add"], {
                    "bucket": [r.bucket for r in minute], "queue": [r.queue for r in minute],
                    "task": [r.task for r in minute], "metric": [r.metric for r in minute],
                    "value": [float(r.value) for r in minute],
                })
            if total:
                await conn.execute(self._q["metrics_total_add"], {
                    "queue": [r.queue for r in total], "task": [r.task for r in total],
                    "metric": [r.metric for r in total], "value": [float(r.value) for r in total],
                })

    async def metrics_prune(self, before: float) -> int:
        async with self._transaction() as conn:
            values = {"before": before}
            first = await conn.execute(self._q["metrics_prune"], values)
            second = await conn.execute(self._q["metrics_depth_prune"], values)
            return max(first.rowcount, 0) + max(second.rowcount, 0)

    async def table_vacuum(self, name: str) -> None:
        """On an autocommit pooled connection (VACUUM refuses a transaction block);
        SKIP_LOCKED leaves a table autovacuum is working on to it, instead of waiting."""
        if not _CONVEYOR_TABLE.fullmatch(name):
            raise ValueError(f"not a Conveyor table: {name!r}")
        statement = sql.SQL("VACUUM (SKIP_LOCKED) {}").format(sql.Identifier(name))
        async with self._conn() as conn:
            await conn.execute(statement, prepare=False)
