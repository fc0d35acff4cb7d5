"""The performance fast paths return exactly what the general paths would."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from datetime import UTC, datetime, timedelta
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
