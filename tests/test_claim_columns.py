"""The narrow claim: a claim reads only ``rows.CLAIM_COLUMNS`` and leaves the JSON
columns (arguments first) to be decoded on first access, yet the Job a worker holds is
the whole row, on both backends: equal to the same row read back whole, on a first
attempt and on a retry."""

from __future__ import annotations

import asyncio
import dataclasses
import pickle
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

import conveyor._job
from conveyor import Conveyor, Job, JobState, current_job
from conveyor._job import FINAL_STATES, JsonText
from conveyor._storage import (
    JobAck,
    JobAckManyParams,
    JobFetchAvailableParams,
    JobInsert,
    JobProgress,
    Storage,
    load_queries,
    make_job,
)
from conveyor._storage.rows import (
    CLAIM_COLUMNS,
    CLAIM_CONSTANTS,
    CLAIM_PACKED,
    claim_columns,
    claim_returning,
)

from ._runtime_util import in_state, run_worker_until

NOW = datetime(2026, 11, 28, tzinfo=UTC)


def claim(owner: str = "node-a") -> JobFetchAvailableParams:
    return JobFetchAvailableParams(queue="default", limit=10, owner=owner, lease_ttl=30.0)


def full_insert(unique_key: str | None = None) -> JobInsert:
    """A job with a value in every column an insert writes."""
    return JobInsert(task="t", queue="default", args_json='[1, {"a": [2, "x"]}, null]',
                     kwargs_json='{"k": "v", "n": {"m": 1.5}}', priority=3, max_attempts=4,
                     tags_json='["red", "blue"]', meta_json='{"owner": "ops"}',
                     unique_key=unique_key, unique_states=",available,running,",
                     concurrency_key="tenant-1")


@pytest.fixture
def counted_decodes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every JSON text a Job decodes on access, in order."""
    seen: list[str] = []
    real = conveyor._job.loads

    def counting(text: str | None, unreadable: Any = None) -> Any:
        seen.append(str(text))
        return real(text, unreadable)

    monkeypatch.setattr(conveyor._job, "loads", counting)
    yield seen


def test_the_claim_columns_are_written_once_for_both_dialects() -> None:
    fields = {f.name for f in dataclasses.fields(Job)}
    assert fields == set(CLAIM_COLUMNS) | CLAIM_CONSTANTS.keys()
    assert not set(CLAIM_COLUMNS) & CLAIM_CONSTANTS.keys()
    for dialect in ("sqlite", "postgres"):
        sql = load_queries(dialect)["job_fetch_available"]
        assert "{claim_columns}" not in sql and "RETURNING *" not in sql
        assert sql.endswith("RETURNING " + claim_returning(dialect))


def test_a_claimed_job_equals_its_row_read_whole_and_decodes_on_first_read(
        app: Conveyor, counted_decodes: list[str]) -> None:
    @app.task
    def member(n: int) -> None: ...

    made = app.batch([member.job(1)])  # a batch id on the row too

    async def body(s: Storage) -> None:
        await s.job_insert_many([full_insert("u-1")])
        got = await s.job_fetch_available(claim())
        assert len(got) == 2 and not counted_decodes  # nothing decoded by the claim
        for job in got:
            whole = await s.job_get(job.id)
            assert whole is not None and whole.state is JobState.RUNNING
            assert job == whole and repr(job) == repr(whole)
        job = next(j for j in got if j.task == "t")
        assert counted_decodes  # the comparison read them
        assert job.args == [1, {"a": [2, "x"]}, None] and job.kwargs == {"k": "v", "n": {"m": 1.5}}
        assert job.args is job.args  # decoded once, then kept
        assert job.tags == ["red", "blue"] and job.meta == {"owner": "ops"}
        assert (job.unique_key, job.concurrency_key, job.lease_owner) == ("u-1", "tenant-1",
                                                                          "node-a")
        assert job.errors == [] and job.result is None and job.finished_at is None
        assert next(j for j in got if j.task != "t").batch_id == made.id

    asyncio.run(_run(app, body))


def test_a_retried_claim_reads_its_earlier_errors_and_attempt(app: Conveyor) -> None:
    async def body(s: Storage) -> None:
        await s.job_insert_many([full_insert()])
        (first,) = await s.job_fetch_available(claim())
        assert first.lease_token is not None
        await s.job_progress_many([JobProgress(first.id, first.lease_token, 0.5, "half")])
        failed = JobAck(first.id, first.lease_token, JobState.AVAILABLE,
                        error_json='{"error": "boom", "attempt": 1}', run_time=0.25)
        assert await s.job_ack_many(JobAckManyParams([failed], node="node-a")) == [first.id]
        (again,) = await s.job_fetch_available(claim(owner="node-b"))
        assert again.attempt == 2 and again.lease_owner == "node-b"
        assert [e["error"] for e in again.errors] == ["boom"]
        assert (again.ran_on, again.run_time) == ("node-a", 0.25)
        assert (again.progress, again.progress_message) == (0.5, "half")
        assert again == await s.job_get(again.id)

    asyncio.run(_run(app, body))


def test_a_retried_handler_sees_its_earlier_errors_through_current_job(app: Conveyor) -> None:
    seen: list[tuple[int, int, list[str], list[Any], dict[str, Any]]] = []

    @app.task(backoff=0, max_attempts=3)
    def flaky(n: int, *, word: str) -> str:
        job = current_job().job
        seen.append((job.attempt, job.max_attempts, [str(e["error"]) for e in job.errors],
                     job.args, job.kwargs))
        if job.attempt < 2:
            raise RuntimeError(f"not yet {n}")
        return word

    async def main() -> None:
        job = await flaky.enqueue_async(7, word="done")
        await run_worker_until(app, in_state(app, job, *FINAL_STATES))
        await app.close_async()

    asyncio.run(main())
    assert [s[:2] for s in seen] == [(1, 3), (2, 3)]
    assert seen[0][2] == [] and len(seen[1][2]) == 1 and "not yet 7" in seen[1][2][0]
    assert all(s[3:] == ([7], {"word": "done"}) for s in seen)


def test_json_text_decodes_on_first_read_and_is_invisible_after() -> None:
    """The Job API with undecoded columns: attributes, equality, repr, replace and
    pickling all see the decoded values; an unreadable value gives the column's
    unreadable value (None for arguments: the executor discards such a job)."""
    def job(**json: Any) -> Job:
        return make_job(id=1, task="t", queue="q", priority=0, state=JobState.RUNNING,
                        attempt=1, max_attempts=3, scheduled_at=NOW, created_at=NOW, **json)

    lazy = job(args=JsonText("[1, 2]"), kwargs=JsonText('{"a": 1}'),
               errors=JsonText('[{"e": 1}]'), tags=JsonText('["x"]'), meta=JsonText('{"m": 2}'))
    eager = job(args=[1, 2], kwargs={"a": 1}, errors=[{"e": 1}], tags=["x"], meta={"m": 2})
    assert repr(lazy) == repr(eager) and lazy == eager
    assert type(lazy.args) is list and type(lazy.meta) is dict
    assert pickle.loads(pickle.dumps(job(args=JsonText("[3]"), kwargs={}))).args == [3]
    replaced = dataclasses.replace(job(args=JsonText("[4]"), kwargs={}), attempt=2)
    assert replaced.args == [4] and replaced.attempt == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        lazy.args = []  # type: ignore[misc]
    broken = job(args=JsonText("[1, 2"), kwargs=JsonText("{"), errors=JsonText("nope"),
                 tags=JsonText("["), meta=JsonText("}"))
    values: list[Any] = [broken.args, broken.kwargs, broken.errors, broken.tags, broken.meta]
    assert values == [None, None, [], [], {}]


async def _run(app: Conveyor, body: Any) -> None:
    try:
        await body(await app.storage())
    finally:
        await app.close_async()


def test_sqlite_packs_the_usual_columns_and_unpacks_every_one(db_url: str) -> None:
    """SQLite returns the columns that nearly always hold their usual value as one
    (``rows.CLAIM_PACKED``): a job with the usual values and a job with another value in
    every packed column are both claimed equal to their rows read whole."""
    if not db_url.startswith("sqlite"):
        pytest.skip("only SQLite packs claim columns")
    import sqlite3

    assert "rare" in claim_columns("sqlite") and claim_columns("postgres") == CLAIM_COLUMNS
    assert not set(CLAIM_PACKED) & set(claim_columns("sqlite"))
    app = Conveyor(db_url)

    async def body(s: Storage) -> None:
        plain, odd = await s.job_insert_many([full_insert(), full_insert()])
        with sqlite3.connect(db_url[len("sqlite:///"):]) as conn:
            conn.execute(
                "UPDATE conveyor_jobs SET errors = ?, cancel_requested = 1, unique_key = ?,"
                " concurrency_key = ?, ran_on = 'n\"1', workflow_id = 'wf-é', batch_id = 7,"
                " deps_pending = 2, progress_message = ?, requires = ? WHERE id = ?",
                ('[{"error": "x\\ny"}]', "u'1", "c\\\\2", "half \u2713 \"q\"",
                 '{"gpu": "a100"}', odd.id))
        routed = JobFetchAvailableParams(queue="default", limit=10, owner="node-a",
                                         lease_ttl=30.0, labels={"gpu": "a100"})
        got = {j.id: j for j in await s.job_fetch_available(routed)}
        for job in (plain, odd):
            whole = await s.job_get(job.id)
            assert whole is not None and got[job.id] == whole
        other = got[odd.id]
        assert (other.errors, other.cancel_requested, other.batch_id, other.deps_pending) == (
            [{"error": "x\ny"}], True, 7, 2)
        assert (other.ran_on, other.workflow_id, other.requires) == ('n"1', "wf-é",
                                                                    {"gpu": "a100"})
        assert other.progress_message == "half \u2713 \"q\""
        usual = got[plain.id]
        assert (usual.errors, usual.cancel_requested, usual.deps_pending) == ([], False, 0)
        assert usual.errors is not got[odd.id].errors

    asyncio.run(_run(app, body))
