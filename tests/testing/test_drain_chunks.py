"""drain() and inline mode run a chunk task's jobs in chunks, as a worker does: up to
``size`` jobs per handler call, each with its own outcome; plain jobs beside them run
one at a time as before."""

from __future__ import annotations

from conveyor import Chunk, ChunkJob, ChunkResult, Conveyor, JobState


def test_drain_runs_chunks_and_plain_jobs_beside_them(conveyor_app: Conveyor) -> None:
    app = conveyor_app
    calls: list[int] = []

    @app.task(chunk=Chunk(size=4, wait=5.0), max_attempts=2, backoff=600)
    def square(jobs: list[ChunkJob]) -> ChunkResult:
        calls.append(len(jobs))
        return ChunkResult(failed={j.id: ValueError("odd") for j in jobs if j.args[0] == 7},
                           results={j.id: j.args[0] ** 2 for j in jobs})

    @app.task
    def plain(n: int) -> int:
        return -n

    specs = [square.job(i) if i % 5 else plain.job(i) for i in range(15)]
    app.enqueue_many(specs)
    result = app.drain()
    assert calls == [4, 4, 4]  # gathered across the plain jobs between them, no waiting
    squares = {o.job.args[0]: o for o in result if o.task == "square"}
    assert {n: o.result for n, o in squares.items() if o.kind == "completed"} == {
        n: n * n for n in range(15) if n % 5 and n != 7}
    assert squares[7].kind == "retried" and squares[7].error == "ValueError: odd"
    assert sorted(o.result for o in result if o.task == "plain") == [-10, -5, 0]

    capped = app.drain(include_scheduled=True, max_jobs=1)  # the retry, alone
    assert [o.kind for o in capped] == ["discarded"] and calls[-1] == 1
    assert app.get_job(squares[7].id).state is JobState.DISCARDED  # type: ignore[union-attr]


def test_inline_runs_a_chunk_task_job_as_a_chunk_of_one(conveyor_app: Conveyor) -> None:
    app = conveyor_app

    @app.task(chunk=Chunk(size=10))
    async def shout(jobs: list[ChunkJob]) -> list[str]:
        return [f"{j.args[0]}!" for j in jobs]

    with app.inline():
        job = shout.enqueue("hey")
    got = app.get_job(job.id)
    assert got is not None and got.state is JobState.COMPLETED and got.result == "hey!"
