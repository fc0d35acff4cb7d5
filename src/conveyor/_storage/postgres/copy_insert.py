"""Plain batches through ``COPY ... FROM STDIN (FORMAT BINARY)``: the fastest way into
PostgreSQL, several times cheaper than an unnest INSERT for client and server alike.

A batch is one transaction of two statements:

1. ``job_reserve_ids`` reserves the ids (``nextval`` once per job: COPY cannot return
   them, and an identity column accepts explicit values from COPY), reads the
   transaction's ``now()`` (the jobs' creation time, as every insert uses) and sends
   one NOTIFY per queue, delivered only if the transaction commits;
2. ``job_copy_plain`` streams the rows, encoded here: state and due time are computed
   from that ``now()`` exactly as ``job_insert_plain`` computes them.

The binary rows are built by hand rather than by psycopg's per-value dumpers: jobs of
one batch share everything but their id and arguments (same task, queue, options), so
the rest of each row is encoded once per distinct combination and reused.

The rows are streamed in chunks of ``CHUNK``: the server inserts one chunk while the
next is encoded (and, with ``jobs_too``, while the Jobs of the last one are built), so
on two cores a large batch costs about what the server's part of it costs, not the sum
of the client's and the server's (``bench/floor.py`` copy_batches is that part).
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from ..._job import Job
from ..inserted import jobs_from_inserts, jobs_from_run
from ..job_types import JobInsert
from ..lazy_inserts import InsertRun, queues_of, runs_of
from ..rows import utc

#: Batches at least this large go through COPY; smaller ones through one INSERT. COPY
#: takes four round trips (BEGIN, reserve, COPY, COMMIT) where the autocommitted INSERT
#: takes one, and pays off as the batch grows: on the loaded 2-core machine the two
#: crossed between 128 and 512 jobs (2,000 jobs: 117 ms against 162 ms).
COPY_MIN_BATCH = 256
#: Rows encoded and sent at a time (about 25 kB of no-op jobs): small enough that the
#: server starts inserting at once, large enough that a write costs little per row.
CHUNK = 250

_HEADER = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
_TRAILER = b"\xff\xff"
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_NULL = b"\xff\xff\xff\xff"
#: Fields per row; the order of ``job_copy_plain``'s column list.
_FIELDS = 13
_tail = struct.Struct(">iqi").pack  # id's length and value, then the arguments' length


def _text(value: str | None) -> bytes:
    if value is None:
        return _NULL
    data = value.encode()
    return len(data).to_bytes(4, "big", signed=True) + data


def _jsonb(value: str) -> bytes:
    data = value.encode()  # jsonb's binary format: a version byte, then the text
    return (len(data) + 1).to_bytes(4, "big", signed=True) + b"\x01" + data


def _micros(value: datetime) -> int:
    """Microseconds since PostgreSQL's epoch, its timestamptz binary format."""
    delta = value - _PG_EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _prefix(job: JobInsert, state: str, due: int, now: int) -> bytes:
    """Every field of a row before its id and arguments."""
    return b"".join((
        _FIELDS.to_bytes(2, "big"), _text(job.task), _text(job.queue), _jsonb(job.kwargs_json),
        struct.pack(">ih", 2, job.priority), struct.pack(">ii", 4, job.max_attempts),
        _jsonb(job.tags_json), _jsonb(job.meta_json), _text(state),
        struct.pack(">iq", 8, due), struct.pack(">iq", 8, now), _text(job.concurrency_key),
    ))


@dataclass(slots=True)
class Inserted:
    """What the database decided for a plain batch, in input order: ids, states, due
    times, and the creation time they share (the transaction's ``now()``); ``jobs``:
    the Jobs built while the rows streamed, when asked for (``jobs_too``)."""

    ids: list[int]
    states: list[str]
    scheduled: list[datetime]
    now: datetime
    jobs: list[Job] | None = field(default=None)


def encode(jobs: Sequence[JobInsert], ids: Sequence[int], now: datetime) -> tuple[bytes, Inserted]:
    """The COPY BINARY stream of ``jobs`` with these ``ids``, and what it writes."""
    body, inserted = _encode_runs(runs_of(jobs, 0, len(jobs)), ids, now, {})
    return _HEADER + body + _TRAILER, inserted


def _due(job: JobInsert, now: datetime, now_us: int) -> tuple[datetime, int]:
    """When ``job`` is due (the transaction's ``now()`` unless delayed), and in µs."""
    if job.run_at is None and not job.delay:
        return now, now_us
    when = (job.run_at.astimezone(UTC) if job.run_at is not None
            else now + timedelta(seconds=float(job.delay or 0.0)))
    return when, _micros(when)


def _encode_runs(runs: Sequence[InsertRun], ids: Sequence[int], now: datetime,
                 prefixes: dict[tuple[Any, ...], bytes]) -> tuple[bytes, Inserted]:
    """The rows of ``runs`` (no header, no trailer); ``prefixes`` is shared by the
    chunks of one batch. A run's jobs share their row but for id and arguments."""
    now_us = _micros(now)
    chunks: list[bytes] = []
    append = chunks.append
    states: list[str] = []
    scheduled: list[datetime] = []
    at = 0
    for run in runs:
        job, count = run.base, len(run.args)
        when, due = _due(job, now, now_us)
        state = "scheduled" if due > now_us else "available"
        states += [state] * count
        scheduled += [when] * count
        key = (job.task, job.queue, job.kwargs_json, job.priority, job.max_attempts,
               job.tags_json, job.meta_json, job.concurrency_key, due)
        prefix = prefixes.get(key)
        if prefix is None:
            prefix = prefixes[key] = _prefix(job, state, due, now_us)
        for job_id, text in zip(ids[at:at + count], run.args, strict=True):
            args = text.encode()
            append(prefix)
            append(_tail(8, job_id, len(args) + 1))
            append(b"\x01")
            append(args)
        at += count
    if at != len(ids):
        raise ValueError(f"{len(ids)} ids for {at} rows")
    return b"".join(chunks), Inserted(list(ids), states, scheduled, now)


def _jobs(runs: Sequence[InsertRun], inserted: Inserted) -> list[Job]:
    """The Jobs of ``runs`` as ``inserted`` says the database wrote them."""
    if all(len(run.args) == 1 and run.args[0] is run.base.args_json for run in runs):
        # a list of inserts (runs_of): one call for the lot, not one per job
        return jobs_from_inserts([run.base for run in runs], inserted.ids, inserted.states,
                                 inserted.scheduled, [inserted.now] * len(runs))
    out: list[Job] = []
    at = 0
    for run in runs:
        count = len(run.args)
        out += jobs_from_run(run.base, run.args, inserted.ids[at:at + count],
                             inserted.states[at], inserted.scheduled[at], inserted.now)
        at += count
    return out


def _stream(jobs: Sequence[JobInsert], ids: Sequence[int], now: datetime,
            done: Inserted) -> Iterator[bytes]:
    """The COPY stream in chunks; ``done`` gathers what each chunk wrote, and its Jobs
    (when ``done.jobs`` is a list) once the chunk is handed to the server: built
    while the server inserts."""
    prefixes: dict[tuple[Any, ...], bytes] = {}
    yield _HEADER
    for start in range(0, len(jobs), CHUNK):
        runs = runs_of(jobs, start, start + CHUNK)
        data, inserted = _encode_runs(runs, ids[start:start + CHUNK], now, prefixes)
        yield data
        done.ids += inserted.ids
        done.states += inserted.states
        done.scheduled += inserted.scheduled
        if done.jobs is not None:
            done.jobs += _jobs(runs, inserted)
    yield _TRAILER


def _reserve_values(jobs: Sequence[JobInsert], channel: str) -> dict[str, Any]:
    return {"count": len(jobs), "queues": queues_of(jobs), "channel": channel}


async def copy_async(conn: psycopg.AsyncConnection[Any], queries: Mapping[str, str],
                     jobs: Sequence[JobInsert], channel: str,
                     prepare: bool | None = None, jobs_too: bool = False) -> Inserted:
    """Copy ``jobs`` in one transaction: its own on an autocommit connection (a pooled
    one), else the one the connection is in or implicitly begins (a caller's, which the
    caller commits or rolls back: ``transaction()`` there would commit on its own).
    ``jobs_too``: the Jobs too, in ``Inserted.jobs``."""
    async with conn.transaction() if conn.autocommit else contextlib.nullcontext():
        cur = conn.cursor(row_factory=tuple_row)
        await cur.execute(queries["job_reserve_ids"], _reserve_values(jobs, channel),
                          prepare=prepare)
        row = await cur.fetchone()
        assert row is not None
        done = _started(utc(row[0]), jobs_too)  # a caller's session may run in another zone
        async with cur.copy(queries["job_copy_plain"]) as copy:
            for data in _stream(jobs, sorted(row[1]), done.now, done):
                await copy.write(data)
    return done


def copy_sync(conn: psycopg.Connection[Any], queries: Mapping[str, str],
              jobs: Sequence[JobInsert], channel: str, prepare: bool | None = None,
              jobs_too: bool = False) -> Inserted:
    """``copy_async`` on a synchronous connection."""
    with conn.transaction() if conn.autocommit else contextlib.nullcontext():
        cur = conn.cursor(row_factory=tuple_row)
        row = cur.execute(queries["job_reserve_ids"], _reserve_values(jobs, channel),
                          prepare=prepare).fetchone()
        assert row is not None
        done = _started(utc(row[0]), jobs_too)
        with cur.copy(queries["job_copy_plain"]) as copy:
            for data in _stream(jobs, sorted(row[1]), done.now, done):
                copy.write(data)
    return done


def _started(now: datetime, jobs_too: bool) -> Inserted:
    return Inserted([], [], [], now, [] if jobs_too else None)
