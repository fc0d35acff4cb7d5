"""The performance fast paths return exactly what the general paths would."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import sqlite3
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, Job, JobState
from conveyor._storage import (
    JobAck,
    JobAckManyParams,
    JobFetchAvailableParams,
    JobInsert,
    Storage,
    loads,
    make_ack,
    make_insert,
    make_job,
)


def _fields(cls: type[Any]) -> dict[str, Any]:
    return {f.name: f"v{i}" for i, f in enumerate(dataclasses.fields(cls))}


@pytest.mark.parametrize(("cls", "build"), [(Job, make_job), (JobInsert, make_insert),
                                            (JobAck, make_ack)])
def test_fast_constructors_build_the_real_frozen_class(cls: type[Any], build: Any) -> None:
    built = build(**_fields(cls))
    assert type(built) is cls and built == cls(**_fields(cls))
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(built, dataclasses.fields(cls)[0].name, 1)
    assert dataclasses.replace(built) == built


@pytest.mark.parametrize("text", ["[]", "{}", "null", "[1]", '{"a":[1,2.5,null,true]}', '"x"',
                                  " [1] ", "1e400", '"\\u00e9"', "[1]  "])
def test_loads_matches_json(text: str) -> None:
    assert loads(text) == json.loads(text)


@pytest.mark.parametrize("text", ["nope", "[1,", "[1]x", "[" * 100_000])
def test_loads_gives_the_unreadable_value(text: str) -> None:
    assert loads(text) is None and loads(text, []) == []


def _run(app: Conveyor, body: Any) -> Any:
    async def main() -> Any:
        try:
            return await body(await app.storage())
        finally:
            await app.close_async()

    return asyncio.run(main())


def test_bulk_insert_returns_the_rows_as_stored(app: Conveyor) -> None:
    @app.task(tags=["t"])
    def work(i: int, *, name: str = "") -> None: ...

    soon = datetime.now(UTC) + timedelta(hours=1)
    specs = [work.job(i, name="é" * (i % 3)) for i in range(40)]
    specs += [work.options(delay=30).job(-1), work.options(run_at=soon, priority=3).job(-2),
              work.options(meta={"k": [1]}, tags=["u"]).job(-3)]
    jobs = app.enqueue_many(specs)
    assert [j.id for j in jobs] == list(range(jobs[0].id, jobs[0].id + len(specs)))
    for job in jobs:
        stored = app.get_job(job.id)
        assert stored is not None
        assert dataclasses.replace(job, errors=stored.errors) == stored, job.id
    assert [j.state for j in jobs[-3:-1]] == [JobState.SCHEDULED, JobState.SCHEDULED]
    assert jobs[-1].meta == {"k": [1]} and jobs[-1].tags == ["t", "u"]


def test_sync_enqueue_from_many_threads(app: Conveyor) -> None:
    @app.task
    def work(i: int) -> None: ...

    work.enqueue(-1)  # opens the storage; later calls skip the portal's loop
    ids: list[int] = []

    def enqueue(start: int) -> None:
        ids.extend(work.enqueue(i).id for i in range(start, start + 25))

    threads = [threading.Thread(target=enqueue, args=(n * 100,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(ids)) == 100
    assert app.count_jobs()["available"] == 101
    seen: list[Any] = []
    app.on_state_change(seen.append)  # listeners are called on the portal's loop
    job = work.enqueue(7)
    assert [c.job_id for c in seen] == [job.id]


def _ack(job: Job, token: int | None = None) -> JobAck:
    return JobAck(job.id, token if token is not None else job.lease_token or 0,
                  JobState.COMPLETED, result_json="null")


def test_completed_acks_keep_the_fence_per_job(app: Conveyor) -> None:
    """Plain completions go out in one statement, the others one by one; when a lease is
    no longer held, the others still apply and that row is left untouched."""

    async def body(s: Storage) -> None:
        inserts = [JobInsert("t", "default", "[]", "{}", 0, 3, "[]", "{}") for _ in range(5)]
        await s.job_insert_many(inserts)
        c = await s.job_fetch_available(JobFetchAvailableParams("default", 5, "n", 30.0))
        retry = JobAck(c[3].id, c[3].lease_token or 0, JobState.RETRYABLE, delay=60.0,
                       error_json='{"error":"x"}')
        applied = await s.job_ack_many(JobAckManyParams([_ack(c[0]), retry, _ack(c[2])]))
        assert applied == [c[0].id, c[3].id, c[2].id]
        stale = _ack(c[1], (c[1].lease_token or 0) + 1)
        assert await s.job_ack_many(JobAckManyParams([stale, _ack(c[4])])) == [c[4].id]
        rows = {j.id: await s.job_get(j.id) for j in c}
        states = {i: r.state if r else None for i, r in rows.items()}
        assert states == {c[0].id: JobState.COMPLETED, c[1].id: JobState.RUNNING,
                          c[2].id: JobState.COMPLETED, c[3].id: JobState.RETRYABLE,
                          c[4].id: JobState.COMPLETED}
        held = rows[c[1].id]
        assert held is not None and held.lease_token == c[1].lease_token

    _run(app, body)


#: Results as the batch statement carries them (inside a JSON string) and back.
_RESULTS = ["null", '"\\u00e9 \\ud83d\\ude00 \u00e9 \U0001F600 \u2028"',
            '{"a": "q\\"uote\\\\ \\n", "b": [1, 2.5e-7]}', '"' + "x" * 70_000 + '"', "[]"]


def test_a_batch_of_completions_writes_what_one_by_one_writes(app: Conveyor) -> None:
    """The same acks, as one batch (the fast statement) and one per call (the exact
    path): every written column reads back the same, run time and node included."""

    async def body(s: Storage) -> None:
        n = len(_RESULTS)
        await s.job_insert_many([JobInsert("t", "default", "[]", "{}", 0, 3, "[]", "{}")
                                 for _ in range(2 * n)])
        c = await s.job_fetch_available(JobFetchAvailableParams("default", 2 * n, "n", 30.0))
        c.sort(key=lambda j: j.id)

        def acks(jobs: list[Job]) -> list[JobAck]:
            return [JobAck(j.id, j.lease_token or 0, JobState.COMPLETED, result_json=r,
                           run_time=0.25 * i + 1e-9)
                    for i, (j, r) in enumerate(zip(jobs, _RESULTS, strict=True))]

        batch, single = acks(c[:n]), acks(c[n:])
        assert await s.job_ack_many(JobAckManyParams(batch, "node-a")) == [a.id for a in batch]
        for ack in single:
            assert await s.job_ack_many(JobAckManyParams([ack], "node-a")) == [ack.id]
        for one, other in zip(batch, single, strict=True):
            a, b = await s.job_get(one.id), await s.job_get(other.id)
            assert a is not None and b is not None
            assert (a.state, a.result, a.run_time, a.ran_on, a.lease_token) == (
                b.state, b.result, b.run_time, b.ran_on, b.lease_token)
            assert a.finished_at is not None and b.finished_at is not None

    _run(app, body)


def test_a_batch_of_completions_keeps_result_text_as_sent(tmp_path: Path) -> None:
    """SQLite stores a result as text, whatever it is: text that is not JSON, with a NUL
    in it (which the batch statement's JSON string could not carry), reads back whole."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    app = Conveyor(url)
    texts = ["not json \x00 after a NUL", "\u00e9 \t raw", "null"]

    async def body(s: Storage) -> None:
        await s.job_insert_many([JobInsert("t", "default", "[]", "{}", 0, 3, "[]", "{}")
                                 for _ in texts])
        c = await s.job_fetch_available(JobFetchAvailableParams("default", 9, "n", 30.0))
        c.sort(key=lambda j: j.id)
        acks = [JobAck(j.id, j.lease_token or 0, JobState.COMPLETED, result_json=t)
                for j, t in zip(c, texts, strict=True)]
        assert await s.job_ack_many(JobAckManyParams(acks)) == [a.id for a in acks]

    _run(app, body)
    with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
        rows = conn.execute("SELECT result FROM conveyor_jobs_all ORDER BY id").fetchall()
    assert [r[0] for r in rows] == texts
