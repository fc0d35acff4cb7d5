"""The fast enqueue paths: COPY bulk batches on PostgreSQL, the ids-only return
(``enqueue_many_ids``), batch encoding with shared templates, and pipelined single
``enqueue_async`` calls. Every one must write exactly what the plain paths write."""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from contextlib import closing
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from cryptography.fernet import Fernet

from conveyor import (
    Conveyor,
    ConveyorConfig,
    DatabaseUnavailableError,
    Job,
    JobState,
    PayloadTooLargeError,
    StateChange,
    Unique,
)
from conveyor._app.pipeline import InsertPipeline
from conveyor._payload_crypt import ENV
from conveyor._storage import JobInsert, make_insert, make_job

#: At least COPY_MIN_BATCH (postgres/copy_insert.py): these batches go through COPY.
BIG = 300


def _comparable(job: Job) -> tuple[Any, ...]:
    return (job.id, job.task, job.queue, job.args, job.kwargs, job.priority, job.state,
            job.attempt, job.max_attempts, job.scheduled_at, job.created_at, job.tags,
            job.meta, job.concurrency_key)


def _mixed_specs(app: Conveyor) -> list[Any]:
    """A batch of every shape a plain job takes: options, delays, run_at, rich args."""
    @app.task(queue="media", priority=3, tags=["img"], concurrency=2)
    def resize(path: str, *, width: int = 100) -> None: ...

    @app.task
    def mail(to: str, subject: str = "") -> None: ...

    later = datetime.now(UTC) + timedelta(hours=1)
    specs: list[Any] = []
    for i in range(BIG):
        if i % 4 == 0:
            specs.append(resize.job(f"/p/{i}.png", width=i))
        elif i % 4 == 1:
            specs.append(mail.options(delay=30 + i, tags=["t"], meta={"i": i}).job(f"{i}@x"))
        elif i % 4 == 2:
            specs.append(mail.options(run_at=later, queue="slow", priority=-2).job("é", "ü"))
        else:
            specs.append(mail.job(f"{i}@x", subject="s" * (i % 7)))
    return specs


def test_bulk_jobs_and_ids_match_what_is_stored_in_input_order(app: Conveyor) -> None:
    specs = _mixed_specs(app)
    jobs = app.enqueue_many(specs)
    ids = app.enqueue_many_ids(specs)
    assert len(jobs) == len(ids) == BIG
    assert [j.id for j in jobs] == sorted(j.id for j in jobs)  # input order is id order
    assert ids == sorted(ids) and not set(ids) & {j.id for j in jobs}
    for job in jobs:  # the Jobs built from what was sent are what the database holds
        stored = app.get_job(job.id)
        assert stored is not None and _comparable(stored) == _comparable(job)
    for index, (job, job_id) in enumerate(zip(jobs, ids, strict=True)):
        twin = app.get_job(job_id)
        assert twin is not None, index
        assert (twin.task, twin.queue, twin.args, twin.kwargs, twin.state, twin.tags,
                twin.meta, twin.priority) == (job.task, job.queue, job.args, job.kwargs,
                                              job.state, job.tags, job.meta, job.priority)
    states = [j.state for j in jobs]
    assert states.count(JobState.SCHEDULED) == BIG // 2  # the delayed and run_at ones
    assert jobs[0].concurrency_key == "resize" and jobs[1].meta == {"i": 1}


def test_unique_and_plain_jobs_in_one_batch(app: Conveyor) -> None:
    @app.task(unique=Unique())
    def sync_user(user: int) -> None: ...

    @app.task
    def plain(i: int) -> None: ...

    first = app.enqueue_many_ids([sync_user.job(1)])
    specs = [plain.job(i) for i in range(BIG)] + [sync_user.job(1), sync_user.job(2)]
    ids = app.enqueue_many_ids(specs)
    assert ids[-2] == first[0]  # the duplicate gets the live holder's id
    jobs = app.enqueue_many([sync_user.job(2), plain.job(-1)])
    assert jobs[0].duplicate and jobs[0].id == ids[-1] and not jobs[1].duplicate
    assert app.count_jobs()["available"] == 1 + BIG + 1 + 1


def test_batches_split_by_max_batch_keep_order(db_url: str) -> None:
    app = Conveyor(db_url, config=ConveyorConfig(max_batch=260))  # COPY, then an INSERT
    try:
        @app.task
        def noop(i: int) -> None: ...

        ids = app.enqueue_many_ids([noop.job(i) for i in range(BIG)])
        assert ids == sorted(ids) and len(set(ids)) == BIG
        assert [app.get_job(i).args for i in (ids[0], ids[259], ids[260], ids[-1])] == [  # type: ignore[union-attr]
            [0], [259], [260], [BIG - 1]]
    finally:
        app.close()


def test_async_bulk_ids_and_jobs(app: Conveyor) -> None:
    @app.task
    def noop(i: int) -> None: ...

    async def main() -> tuple[list[int], list[Job]]:
        try:
            ids = await app.enqueue_many_ids_async([noop.job(i) for i in range(BIG)])
            jobs = await app.enqueue_many_async([noop.job(i) for i in range(BIG)])
            return ids, jobs
        finally:
            await app.close_async()

    ids, jobs = asyncio.run(main())
    assert [app.get_job(i).args for i in ids] == [[i] for i in range(BIG)]  # type: ignore[union-attr]
    assert [j.args for j in jobs] == [[i] for i in range(BIG)]


def _in_caller_transaction(db_url: str, body: Callable[[Any], object]) -> None:
    """Run ``body(connection)`` in a transaction of the caller's own that rolls back."""
    if db_url.startswith("sqlite"):
        with closing(sqlite3.connect(db_url.removeprefix("sqlite:///"))) as conn:
            conn.execute("BEGIN")
            body(conn)
            conn.rollback()
    else:
        with psycopg.connect(db_url) as pg, pytest.raises(ZeroDivisionError), pg.transaction():
            body(pg)
            raise ZeroDivisionError
        with psycopg.connect(db_url) as pg:  # the implicit transaction of a plain connection
            body(pg)
            pg.rollback()


def test_a_rolled_back_caller_transaction_leaves_no_bulk_job(app: Conveyor, db_url: str) -> None:
    @app.task
    def noop(i: int) -> None: ...

    seen: list[int] = []

    def body(conn: Any) -> None:
        seen.extend(app.enqueue_many_ids([noop.job(i) for i in range(BIG)], connection=conn))
        seen.extend(j.id for j in app.enqueue_many([noop.job(i) for i in range(BIG)],
                                                   connection=conn))

    _in_caller_transaction(db_url, body)
    assert len(set(seen)) == (2 if db_url.startswith("sqlite") else 4) * BIG
    assert app.count_jobs()["available"] == 0 and app.list_jobs() == []
    kept = app.enqueue_many_ids([noop.job(1)])
    assert app.get_job(kept[0]) is not None


def test_a_rolled_back_async_caller_transaction_leaves_nothing(app: Conveyor, db_url: str) -> None:
    if not db_url.startswith("postgres"):
        pytest.skip("async caller connections are a psycopg feature")

    @app.task
    def noop(i: int) -> None: ...

    async def main() -> list[int]:
        async with await psycopg.AsyncConnection.connect(db_url) as conn:
            with pytest.raises(ZeroDivisionError):
                async with conn.transaction():
                    await app.enqueue_many_ids_async([noop.job(i) for i in range(BIG)],
                                                     connection=conn)
                    raise ZeroDivisionError
            async with conn.transaction():
                return await app.enqueue_many_ids_async([noop.job(i) for i in range(BIG)],
                                                        connection=conn)

    ids = asyncio.run(main())
    assert sorted(j.id for j in app.list_jobs(limit=1000)) == ids


def test_bad_input_is_refused_and_writes_nothing(app: Conveyor) -> None:
    @app.task
    def noop(i: int) -> None: ...

    with pytest.raises(TypeError, match="list of jobs"):
        app.enqueue_many_ids(noop.job(1))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected a job"):
        app.enqueue_many_ids([noop.job(i) for i in range(BIG)] + ["x"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="not JSON-serialisable"):
        app.enqueue_many_ids([noop.job(i) for i in range(BIG)] + [noop.job(object())])  # type: ignore[arg-type]
    with pytest.raises(PayloadTooLargeError):
        app.enqueue_many_ids([noop.job(i) for i in range(BIG)] + [noop.job("x" * 2_000_000)])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="arguments do not fit"):
        app.enqueue_many_ids([noop.job(1, 2)])  # type: ignore[call-arg]
    a: list[Any] = []
    a.append(a)  # a cycle: the fast encoder's RecursionError becomes the same clear error
    with pytest.raises(TypeError, match="not JSON-serialisable"):
        app.enqueue_many_ids([noop.job(a)])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="connection"):
        app.enqueue_many_ids([noop.job(i) for i in range(BIG)], connection=object())
    assert app.list_jobs() == []
    assert app.enqueue_many_ids([]) == []


def test_a_dead_database_gives_a_clear_error_on_bulk_ids(tmp_path: Any) -> None:
    for url in ("postgresql://postgres@127.0.0.1:1/nothing",
                f"sqlite:///{tmp_path}/missing/dir/jobs.db"):
        app = Conveyor(url)

        @app.task
        def noop(i: int) -> None: ...

        with pytest.raises(DatabaseUnavailableError):
            app.enqueue_many_ids([noop.job(i) for i in range(BIG)])
        with pytest.raises(DatabaseUnavailableError):
            asyncio.run(noop.enqueue_async(1))
        app.close()


def test_listeners_see_bulk_ids_enqueues(app: Conveyor) -> None:
    seen: list[StateChange] = []
    app.on_state_change(seen.append)

    @app.task
    def noop(i: int) -> None: ...

    ids = app.enqueue_many_ids([noop.job(i) for i in range(BIG)])
    assert [c.job_id for c in seen] == ids
    assert {c.state for c in seen} == {JobState.AVAILABLE}


def test_encrypted_jobs_are_sealed_on_the_bulk_path(
        app: Conveyor, db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, Fernet.generate_key().decode())

    @app.task(encrypt=True)
    def pay(card: str) -> None: ...

    # "." is in neither base64url (Fernet's tokens) nor the envelope: the plaintext
    # cannot turn up in a ciphertext by chance ("4111" alone did, once in ~1,000 runs)
    ids = app.enqueue_many_ids([pay.job(f"4111.{i:04}") for i in range(BIG)])
    query = "SELECT args FROM conveyor_jobs"
    if db_url.startswith("sqlite"):
        with closing(sqlite3.connect(db_url.removeprefix("sqlite:///"))) as conn:
            text = " ".join(r[0] for r in conn.execute(query))
    else:
        with psycopg.connect(db_url) as pg:
            text = " ".join(r[0] for r in pg.execute(query.replace("args", "args::text")))
    assert "4111." not in text and text.count("encrypted") == BIG
    sealed = {str(app.get_job(i).args) for i in ids}  # type: ignore[union-attr]
    assert len(sealed) == BIG  # each job sealed on its own, never a shared template


def test_concurrent_enqueue_async_calls_are_written_together(app: Conveyor) -> None:
    @app.task
    def noop(i: int) -> None: ...

    async def main() -> list[Job]:
        try:
            return await asyncio.gather(*(noop.enqueue_async(i) for i in range(BIG)))
        finally:
            await app.close_async()

    jobs = asyncio.run(main())
    assert [j.args for j in jobs] == [[i] for i in range(BIG)]
    assert len({j.id for j in jobs}) == BIG
    for job in jobs[::17]:
        stored = app.get_job(job.id)
        assert stored is not None and _comparable(stored) == _comparable(job)


def _insert(task: str) -> JobInsert:
    return make_insert(task=task, queue="default", args_json="[]", kwargs_json="{}",
                       priority=0, max_attempts=1, tags_json="[]", meta_json="{}")


def test_a_failed_pipelined_batch_gives_each_caller_its_own_outcome() -> None:
    """One job the database refuses fails its own caller only (InsertPipeline alone:
    the write is a stand-in that refuses any batch holding a "bad" job)."""
    batches: list[list[str]] = []

    async def write(inserts: Sequence[JobInsert]) -> list[Job]:
        await asyncio.sleep(0)  # in flight: later callers queue up
        batches.append([j.task for j in inserts])
        if any(j.task == "bad" for j in inserts):
            raise ValueError("refused")
        return [make_job(id=len(batches) * 1000 + i, task=j.task, queue=j.queue, args=[],
                         kwargs={}, priority=0, state=JobState.AVAILABLE, attempt=0,
                         max_attempts=1, scheduled_at=None, created_at=None, errors=[],
                         tags=[], meta={}) for i, j in enumerate(inserts)]

    async def main() -> list[Any]:
        pipeline = InsertPipeline(None, write, max_batch=3)
        calls: list[Awaitable[Job]] = [pipeline.insert(_insert(t)) for t in
                                       ["a", "b", "bad", "c", "d", "e", "f"]]
        return await asyncio.gather(*calls, return_exceptions=True)

    out = asyncio.run(main())
    assert [type(o).__name__ for o in out] == ["Job", "Job", "ValueError"] + ["Job"] * 4
    assert [o.task for o in out if isinstance(o, Job)] == ["a", "b", "c", "d", "e", "f"]
    assert batches[0] == ["a"]  # a lone caller is written at once
    assert ["b", "bad", "c"] in batches and ["b"] in batches and ["bad"] in batches
    assert max(len(b) for b in batches) == 3  # max_batch


def test_concurrent_enqueue_async_of_one_unique_job_gives_one_job(app: Conveyor) -> None:
    @app.task(unique=Unique())
    def sync_user(user: int) -> None: ...

    async def main() -> list[Job]:
        try:
            return await asyncio.gather(*(sync_user.enqueue_async(i % 3) for i in range(30)))
        finally:
            await app.close_async()

    jobs = asyncio.run(main())
    assert len({j.id for j in jobs}) == 3
    assert {j.id: j.args for j in jobs} == {j.id: [i % 3] for i, j in enumerate(jobs)}
    assert sum(not j.duplicate for j in jobs) == 3
    assert app.count_jobs()["available"] == 3


def test_bulk_ids_follow_a_sqlalchemy_session(app: Conveyor, db_url: str) -> None:
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from .contrib.test_sqlalchemy import sa_url

    @app.task
    def noop(i: int) -> None: ...

    engine = create_engine(sa_url(db_url))
    try:
        with Session(engine) as session, session.begin():
            ids = app.enqueue_many_ids([noop.job(i) for i in range(BIG)], connection=session)
        with Session(engine) as session:
            session.begin()
            app.enqueue_many_ids([noop.job(i) for i in range(BIG)], connection=session)
            session.rollback()
    finally:
        engine.dispose()
    assert sorted(j.id for j in app.list_jobs(limit=1000)) == ids and len(ids) == BIG


def test_lone_enqueues_share_their_task_template_and_nothing_else(app: Conveyor) -> None:
    """``task.enqueue`` reuses what an earlier enqueue of the task encoded (all but the
    arguments); options, a payload cap and other arguments are each still honoured."""
    @app.task(tags=["a"], queue="q", priority=2)
    def send(to: str, *, n: int = 0) -> None: ...

    first, second = send.enqueue("x"), send.enqueue("y", n=5)
    other = send.options(tags=["b"], queue="r", delay=60).enqueue("z")
    for job in (first, second, other):
        stored = app.get_job(job.id)
        assert stored is not None and _comparable(stored) == _comparable(job)
    assert (second.args, second.kwargs, second.tags, second.queue) == (["y"], {"n": 5}, ["a"], "q")
    assert (other.tags, other.queue, other.state) == (["a", "b"], "r", JobState.SCHEDULED)
    small = Conveyor(app.url, config=ConveyorConfig(max_payload_bytes=64))
    small.tasks[send.name] = send  # same task object, template made under the larger cap
    try:
        with pytest.raises(PayloadTooLargeError):
            small.enqueue_many([send.job("w" * 100)])
    finally:
        small.close()


@pytest.mark.parametrize("api", ["sync", "async", "ids", "ids_async"])
def test_a_job_refused_late_in_a_large_batch_writes_nothing_of_it(
        app: Conveyor, api: str) -> None:
    """On PostgreSQL the COPY starts before the last jobs are encoded (``LazyInserts``):
    one refused there aborts it, rolled back whole; the connection serves the next."""
    @app.task
    def noop(i: Any) -> None: ...

    def enqueue(specs: list[Any]) -> Any:
        if api == "sync":
            return app.enqueue_many(specs)
        if api == "ids":
            return app.enqueue_many_ids(specs)
        many = app.enqueue_many_async if api == "async" else app.enqueue_many_ids_async
        return asyncio.run(many(specs))

    noop.enqueue(-1)  # the sync API's storage open: the blocking path is taken
    specs = [noop.job(i) for i in range(2 * BIG)] + [noop.job(object())]
    with pytest.raises(TypeError):
        enqueue(specs)
    specs = [noop.job("x" * 2_000_000)] if api == "sync" else []
    if specs:
        with pytest.raises(PayloadTooLargeError):
            enqueue([noop.job(i) for i in range(BIG)] + specs)
    assert app.count_jobs()["available"] == 1
    assert len(enqueue([noop.job(i) for i in range(BIG)])) == BIG
    assert app.count_jobs()["available"] == 1 + BIG


def test_small_batches_alike_but_for_their_arguments_match_what_is_stored(
        app: Conveyor) -> None:
    """A batch below COPY's size whose jobs differ only in their arguments (what an
    enqueue_async pipeline batch holds) goes through the shorter statement on
    PostgreSQL: every option still lands, and a batch not alike takes the long one."""
    @app.task(queue="media", priority=3, tags=["img"], concurrency=2)
    def resize(path: str, *, width: int = 100) -> None: ...

    later = datetime.now(UTC) + timedelta(hours=1)
    groups = [
        [resize.job(f"/p/{i}", width=i) for i in range(20)],
        [resize.options(delay=30, meta={"m": 1}).job(f"/d/{i}") for i in range(20)],
        [resize.options(run_at=later, queue="slow", priority=-2).job("é") for _ in range(5)],
        [resize.job("/a"), resize.options(delay=5).job("/b"), resize.job("/c")],  # not alike
    ]
    for specs in groups:
        jobs = app.enqueue_many(specs)
        assert [j.args for j in jobs] == [s.args and list(s.args) for s in specs]
        for job in jobs:
            stored = app.get_job(job.id)
            assert stored is not None and _comparable(stored) == _comparable(job)
    states = [j.state for j in app.list_jobs(limit=100)]
    assert states.count(JobState.SCHEDULED) == 20 + 5 + 1


@pytest.mark.parametrize("hooked", [False, True])
def test_runs_of_alike_jobs_across_copy_chunks_match_what_is_stored(
        app: Conveyor, hooked: bool) -> None:
    """A batch is written as runs of jobs alike but for their arguments (one task, one
    options object), cut wherever COPY's chunks fall: long runs, runs of one, a task's
    template met again after another, delayed runs and keyword calls, each job stored
    as the Job returned for it, in input order; with an enqueue hook every job gets the
    hook's own call."""
    calls: list[str] = []
    if hooked:
        @app.hooks.add_enqueue_hook
        def stamp(task: str, meta: dict[str, Any]) -> None:
            calls.append(task)
            meta["n"] = len(calls)

    @app.task
    def noop(i: int, *, label: str = "") -> None: ...

    @app.task(queue="other", tags=["t"])
    def other(i: int) -> None: ...

    later = noop.options(delay=60, priority=4)
    specs: list[Any] = [noop.job(i) for i in range(310)]  # across the first chunk's end
    specs += [noop.job(i, label="k") for i in range(3)]
    specs += [later.job(i) for i in range(260)]
    specs += [other.job(i) for i in range(5)] + [noop.job(-1)]
    specs += [noop.job(i) for i in range(400)]
    jobs = app.enqueue_many(specs)
    ids = app.enqueue_many_ids(specs)
    assert len(jobs) == len(ids) == len(specs)
    assert [j.id for j in jobs] == sorted(j.id for j in jobs)
    for spec, job, job_id in zip(specs, jobs, ids, strict=True):
        stored = app.get_job(job.id)
        assert stored is not None and _comparable(stored) == _comparable(job)
        assert (job.task, job.args, job.kwargs) == (spec.task.name, list(spec.args), spec.kwargs)
        twin = app.get_job(job_id)
        assert twin is not None and (twin.args, twin.state, twin.priority, twin.tags) == (
            job.args, job.state, job.priority, job.tags)
    assert [j.state for j in jobs].count(JobState.SCHEDULED) == 260
    if hooked:
        assert len(calls) == 2 * len(specs)
        assert sorted(j.meta["n"] for j in jobs) == list(range(1, len(specs) + 1))
    else:
        assert {repr(j.meta) for j in jobs} == {"{}"}


def test_lazy_runs_read_in_any_cut_are_the_batch_inserts() -> None:
    """``LazyInserts.runs`` cut anywhere gives the inserts reading it whole gives."""
    from conveyor._storage import InsertRun, LazyInserts
    from conveyor._storage.lazy_inserts import runs_of

    base = make_insert(task="t", queue="q", args_json="[0]", kwargs_json="{}", priority=0,
                       max_attempts=3, tags_json="[]", meta_json="{}")
    sizes = [1, 7, 250, 1, 1, 40, 3]
    runs = [InsertRun(base, [f"[{n}, {k}]" for k in range(size)])
            for n, size in enumerate(sizes)]
    flat = [job for run in runs for job in run.inserts()]

    def convert(start: int, stop: int) -> list[InsertRun]:
        jobs = flat[start:stop]
        return [InsertRun(jobs[0], [j.args_json for j in jobs])]

    for cuts in ([0, 303], [0, 5, 6, 260, 303], [0, 1, 2, 3, 100, 250, 251, 302, 303]):
        lazy = LazyInserts(len(flat), convert, plain=True, queues=frozenset({"q"}))
        read = [job for lo, hi in itertools.pairwise(cuts)
                for run in runs_of(lazy, lo, hi) for job in run.inserts()]
        assert read == flat == list(lazy)
        assert [j.args_json for r in lazy.runs(100, 103) for j in r.inserts()] == [
            j.args_json for j in flat[100:103]]
    assert [j for r in runs_of(flat, 2, 9) for j in r.inserts()] == flat[2:9]


def test_several_batches_keep_their_runs_and_are_all_made_first(db_url: str) -> None:
    """A call larger than ``max_batch`` is validated whole before its first batch
    commits (a refused job at the end writes nothing; on PostgreSQL the first batch's
    COPY makes the rest as it goes), then written batch by batch with
    its runs cut at the batches' edges: the Jobs match what is stored, in input order,
    through the sync and async APIs."""
    app = Conveyor(db_url, config=ConveyorConfig(max_batch=260))
    try:
        @app.task
        def noop(i: int, *, label: str = "") -> None: ...

        @app.task(queue="other", unique=Unique())
        def once(i: int) -> None: ...

        specs: list[Any] = [noop.job(i) for i in range(300)]
        specs += [noop.job(i, label="k") for i in range(5)] + [once.job(1), once.job(2)]
        specs += [noop.options(priority=2).job(i) for i in range(400)]
        with pytest.raises(TypeError):
            app.enqueue_many([*specs, noop.job(object())])  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            asyncio.run(app.enqueue_many_async([*specs, noop.job(object())]))  # type: ignore[arg-type]
        assert sum(app.count_jobs().values()) == 0
        jobs = app.enqueue_many(specs)
        later = asyncio.run(app.enqueue_many_async(specs))
        ids = app.enqueue_many_ids(specs)
        assert len(jobs) == len(later) == len(ids) == len(specs)
        for spec, job in zip(specs, jobs + later, strict=False):
            stored = app.get_job(job.id)
            assert stored is not None and _comparable(stored) == _comparable(job)
            assert (job.args, job.kwargs) == (list(spec.args), spec.kwargs)
        fresh = [j.id for j in jobs if j.task == "noop"]
        assert fresh == sorted(fresh) and later[305].id == jobs[305].id  # unique: kept
        assert sum(app.count_jobs().values()) == 3 * (len(specs) - 2) + 2
    finally:
        app.close()


def test_made_batches_cut_runs_at_the_batch_size() -> None:
    from conveyor._storage import InsertRun, made_batches
    from conveyor._storage.lazy_inserts import runs_of

    def insert(queue: str, unique: str | None = None) -> JobInsert:
        return make_insert(task="t", queue=queue, args_json="[0]", kwargs_json="{}",
                           priority=0, max_attempts=3, tags_json="[]", meta_json="{}",
                           unique_key=unique, unique_states=",available," if unique else None)

    runs = [InsertRun(insert("a"), [f"[{i}]" for i in range(7)]), InsertRun.of(insert("b", "k")),
            InsertRun(insert("c"), [f"[{i}]" for i in range(12)])]
    flat = [job for run in runs for job in run.inserts()]
    batches = made_batches(runs, 5)
    assert [len(b) for b in batches] == [5, 5, 5, 5]
    assert [job for b in batches for job in b] == flat
    assert [job for b in batches for r in runs_of(b, 0, len(b)) for job in r.inserts()] == flat
    assert [(b.plain, sorted(b.queues)) for b in batches] == [
        (True, ["a"]), (False, ["a", "b", "c"]), (True, ["c"]), (True, ["c"])]
