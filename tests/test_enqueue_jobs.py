"""The Jobs ``enqueue_many`` returns are built from what was sent, their JSON fields
kept as the text that was written and decoded on first read: each one must be what
``get_job`` reads back for it, field by field, on both backends."""

from __future__ import annotations

import dataclasses
import pickle
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from conveyor import Conveyor, Job, PayloadTooLargeError

#: At least COPY_MIN_BATCH (postgres/copy_insert.py): the COPY path on PostgreSQL.
SIZES = (2, 300)


def _fields(job: Job) -> dict[str, Any]:
    return {f.name: getattr(job, f.name) for f in dataclasses.fields(job) if f.compare}


@pytest.mark.parametrize("size", SIZES)
def test_returned_jobs_are_what_get_job_reads(app: Conveyor, size: int) -> None:
    @app.task(tags=["img"], concurrency=2)
    def resize(path: str, sizes: tuple[int, ...] = (), *, width: int = 100) -> None: ...

    later = datetime.now(UTC) + timedelta(hours=1)
    groups = [
        [resize.job(f"/p/{i}", (i, i + 1)) for i in range(size)],  # tuples stored as lists
        [resize.job(f"/k/{i}", width=i) for i in range(size)],
        [resize.options(meta={"m": [1, "é"]}, tags=["t"], run_at=later).job("ü")
         for _ in range(size)],
    ]
    for specs in groups:
        jobs = app.enqueue_many(specs)
        for job in jobs:
            stored = app.get_job(job.id)
            assert stored is not None and _fields(stored) == _fields(job)
            assert job == stored
            assert pickle.loads(pickle.dumps(job)) == stored
    first = app.get_job(jobs[0].id)
    assert first is not None and first.meta == {"m": [1, "é"]}


def test_returned_jobs_hold_values_of_their_own(app: Conveyor) -> None:
    """Fields most jobs share (no errors, no kwargs, the task's tags) are never one
    object shared by several Jobs: changing one job's list changes no other's."""
    @app.task(tags=["a"])
    def noop(i: int) -> None: ...

    jobs = app.enqueue_many([noop.job(i) for i in range(300)])
    assert [j.args for j in jobs[:3]] == [[0], [1], [2]]
    jobs[0].errors.append({"x": 1})
    jobs[0].kwargs["k"] = 1
    jobs[0].tags.append("b")
    jobs[0].meta["m"] = 1
    assert (jobs[1].errors, jobs[1].kwargs, jobs[1].tags, jobs[1].meta) == ([], {}, ["a"], {})
    assert dataclasses.replace(jobs[2], priority=5).args == [2]


def test_a_batch_the_shared_check_refuses_takes_the_full_path(app: Conveyor) -> None:
    """Arguments checked a run at a time: a run holding text the quick check does not
    pass (non-ASCII, the codec's tag key) is encoded job by job, with the same result
    and the same refusals; text with escapes survives SQLite's insert over a JSON
    array of the arguments."""
    @app.task
    def echo(value: Any) -> None: ...

    values: list[Any] = ["é", {"__conveyor__": "x"}, [1, 2], "plain", "😀 a\"b\\c\n\t",
                         {"k": None, "n": 1.5}] * 60
    jobs = app.enqueue_many([echo.job(v) for v in values])
    stored = [app.get_job(j.id).args for j in jobs]  # type: ignore[union-attr]
    assert [j.args for j in jobs] == stored
    assert stored[0] == ["é"] and stored[2:4] == [[[1, 2]], ["plain"]]
    assert stored[4:6] == [["😀 a\"b\\c\n\t"], [{"k": None, "n": 1.5}]]
    assert stored[1] == [{"__conveyor__": "dict", "v": {"__conveyor__": "x"}}]  # tagged
    with pytest.raises(PayloadTooLargeError):
        app.enqueue_many([echo.job(i) for i in range(300)] + [echo.job("x" * 2_000_000)])
    assert len(app.list_jobs(limit=1000)) == len(values)


def test_a_batch_too_large_for_one_sqlite_statement_is_inserted_row_by_row(
        app: Conveyor, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite inserts jobs alike but for their arguments with one statement over a JSON
    array of them, unless that text is large: then with executemany, same rows."""
    from conveyor._storage.sqlite import batch

    @app.task
    def echo(value: Any, *, n: int = 0) -> None: ...

    monkeypatch.setattr(batch, "MAX_CALLS_TEXT", 100)
    for specs in ([echo.job("x" * 10) for _ in range(20)],
                  [echo.job(i, n=i) for i in range(20)],
                  [echo.job(i) for i in range(3)]):  # small enough: one statement
        jobs = app.enqueue_many(specs)
        assert [j.id for j in jobs] == sorted(j.id for j in jobs)
        for job in jobs:
            assert job == app.get_job(job.id)
    assert len(app.list_jobs(limit=100)) == 43
