"""Routing by worker labels and by task: only a worker that can run a job claims it,
filtered in the claim statement, on both backends."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import socket
import warnings
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, JobState, WorkerConfig, current_job

from ._runtime_util import FAST, run_worker_until


def _labelled(**labels: str) -> Any:
    return dataclasses.replace(FAST, labels=labels)


def test_a_job_requiring_labels_runs_only_on_a_worker_with_them(app: Conveyor) -> None:
    ran: dict[int, str] = {}

    @app.task(requires={"gpu": "a100"})
    async def train(n: int) -> None:
        ran[n] = "gpu"

    @app.task
    async def plain(n: int) -> None:
        ran[n] = "plain"

    async def main() -> None:
        gpu_job = await train.enqueue_async(1)
        plain_job = await plain.enqueue_async(2)
        other = await train.options(requires={"gpu": "h100"}).enqueue_async(3)
        freed = await train.options(requires={}).enqueue_async(4)
        assert gpu_job.requires == {"gpu": "a100"} and plain_job.requires is None
        assert freed.requires is None

        async def plain_done() -> bool:
            got = await app.get_job_async(plain_job.id)
            return got is not None and got.state == JobState.COMPLETED

        # a worker without labels: the plain job and the freed one, never the gpu ones
        await run_worker_until(app, plain_done)
        await asyncio.sleep(0.3)
        assert (await app.get_job_async(gpu_job.id)).state == JobState.AVAILABLE  # type: ignore[union-attr]

        async def gpu_done() -> bool:
            got = await app.get_job_async(gpu_job.id)
            return got is not None and got.state == JobState.COMPLETED

        await run_worker_until(app, gpu_done, config=_labelled(gpu="a100", region="eu"))
        got = await app.get_job_async(other.id)
        assert got is not None and got.state == JobState.AVAILABLE
        assert got.requires == {"gpu": "h100"}
        await app.close_async()

    asyncio.run(main())
    assert ran[1] == "gpu" and ran[2] == "plain" and 3 not in ran


@pytest.mark.parametrize("bad", [
    "gpu=a100", ["gpu"], {"gpu": 1}, {"": "x"}, {"bad key!": "x"}, {"k": "v" * 201},
    {f"k{i}": "v" for i in range(17)},
])
def test_requires_refuses_what_is_not_labels(app: Conveyor, bad: Any) -> None:
    with pytest.raises((TypeError, ValueError), match="requires="):
        app.task(requires=bad)(lambda: None)

    @app.task(name="ok")
    def ok() -> None: ...

    with pytest.raises((TypeError, ValueError), match="requires="):
        ok.options(requires=bad)


def test_explain_says_when_no_live_worker_has_the_labels(app: Conveyor) -> None:
    @app.task(requires={"gpu": "a100"})
    async def train() -> None: ...

    async def main() -> None:
        job = await train.enqueue_async()
        seen: list[str] = []

        async def explained() -> bool:
            seen[:] = (await app.explain_job_async(job.id)).reasons
            return any("needs gpu=a100; no live worker has it" in r for r in seen)

        # a live worker of the queue, without the label: the job waits, and says why
        await run_worker_until(app, explained, config=_labelled(gpu="t4"))
        got = await app.get_job_async(job.id)
        assert got is not None and got.state == JobState.AVAILABLE
        notes = (await app.explain_job_async(job.id)).notes
        assert any("labelled gpu=a100" in n for n in notes)
        await app.close_async()

    asyncio.run(main())


def test_the_dashboard_shows_the_requirement_and_counts_it_per_queue(app: Conveyor) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    from conveyor.web import create_app

    @app.task(queue="ml", requires={"gpu": "a100"})
    def train(n: int) -> None: ...

    @app.task(queue="ml")
    def score(n: int) -> None: ...

    jobs = [train.enqueue(i) for i in range(3)]
    jobs.append(train.options(requires={"gpu": "h100", "region": "eu"}).enqueue(9))
    plain = score.enqueue(1)
    with TestClient(create_app(app), base_url="http://localhost") as client:
        page = client.get(f"/jobs/{jobs[0].id}").text
        assert 'id="job-requires"' in page and "gpu=a100" in page
        assert 'id="job-requires"' not in client.get(f"/jobs/{plain.id}").text
        for path in ("/queues", "/"):
            row = re.search(r'<tr data-queue="ml">.*?</tr>', client.get(path).text, re.S)
            assert row is not None, path
            cell = re.search(r'<td class="requiring">(.*?)</td>', row.group(0), re.S)
            assert cell is not None and cell.group(1).startswith(
                '<span title="waiting jobs that only workers with these labels claim">4</span>')
            # no live worker has them: marked
            assert "gpu=a100 ⚠" in cell.group(1) and "gpu=h100, region=eu ⚠" in cell.group(1)


def test_current_job_tells_the_worker_node_host_and_pid(app: Conveyor) -> None:
    seen: dict[str, Any] = {}

    @app.task
    async def who() -> None:
        ctx = current_job()
        seen.update(node=ctx.node_id, host=ctx.hostname, pid=ctx.pid, labels=dict(ctx.labels))

    async def main() -> None:
        job = await who.enqueue_async()

        async def done() -> bool:
            got = await app.get_job_async(job.id)
            return got is not None and got.state == JobState.COMPLETED

        worker = await run_worker_until(app, done, config=_labelled(zone="b"))
        got = await app.get_job_async(job.id)
        assert got is not None and seen["node"] == worker.node_id == got.ran_on
        await app.close_async()

    asyncio.run(main())
    assert seen["host"] == socket.gethostname() and seen["pid"] == os.getpid()
    assert seen["labels"] == {"zone": "b"}


def test_routes_give_a_queue_to_tasks_that_name_none(db_url: str) -> None:
    app = Conveyor(db_url, routes={"reports.*": "slow", "mail.*": "mail", "*": "misc"})
    try:
        @app.task(name="reports.monthly")
        def monthly() -> None: ...

        @app.task(name="reports.daily", queue="fast")  # its own queue wins
        def daily() -> None: ...

        @app.task(name="mail.welcome")
        def welcome() -> None: ...

        @app.task(name="other")
        def other() -> None: ...

        assert (monthly.defaults.queue, daily.defaults.queue) == ("slow", "fast")
        assert (welcome.defaults.queue, other.defaults.queue) == ("mail", "misc")
        assert monthly.enqueue().queue == "slow"
        assert monthly.options(queue="x").enqueue().queue == "x"
    finally:
        app.close()
    plain = Conveyor(db_url)
    try:
        @plain.task(name="reports.monthly")
        def monthly2() -> None: ...

        assert monthly2.defaults.queue == "default"
    finally:
        plain.close()


@pytest.mark.parametrize(("routes", "error"), [
    (["reports.*"], TypeError), ({"reports.*": "bad queue!"}, ValueError),
    ({"reports.*": ""}, ValueError), ({"": "slow"}, ValueError), ({1: "slow"}, ValueError),
    ({"a": 5}, ValueError),
])
def test_routes_are_checked_at_construction(db_url: str, routes: Any,
                                            error: type[Exception]) -> None:
    with pytest.raises(error, match="routes="):
        Conveyor(db_url, routes=routes)


def test_drain_claims_as_a_worker_with_those_labels_and_tasks(app: Conveyor) -> None:
    @app.task(requires={"gpu": "a100"})
    def train(n: int) -> int:
        return n

    @app.task
    def mail(n: int) -> int:
        return n

    @app.task
    def resize(n: int) -> int:
        return n

    t, m, r = train.enqueue(1), mail.enqueue(2), resize.enqueue(3)
    first = app.drain(tasks=["mail"])
    assert [o.id for o in first.completed] == [m.id]
    assert [j.id for j in first.skipped] == [t.id, r.id]
    assert first.skipped_reasons == [f"job {t.id} (train): needs gpu=a100",
                                     f"job {r.id} (resize): its task is not among tasks="]
    assert "skipped=2" in repr(first)
    second = app.drain()  # no labels: the gpu job stays
    assert [o.id for o in second.completed] == [r.id] and [j.id for j in second.skipped] == [t.id]
    third = app.drain(labels={"gpu": "a100", "zone": "x"})
    assert [o.id for o in third.completed] == [t.id] and third.skipped == []
    with pytest.raises(ValueError, match=r"unknown task.*'nope'.*mail, resize, train"):
        app.drain(tasks=["nope"])
    with pytest.raises(TypeError, match="tasks="):
        app.drain(tasks=[1])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="label key"):
        app.drain(labels={"bad key": "x"})
    with pytest.raises(TypeError, match="labels must be a mapping"):
        app.drain(labels="gpu=a100")  # type: ignore[arg-type]


@pytest.mark.parametrize(("tasks", "error", "match"), [
    ("send_email", TypeError, "tasks must be a list"), ([], ValueError, "at least one task"),
    ([""], ValueError, "at least one task"), ([3], ValueError, "at least one task"),
])
def test_worker_config_tasks_is_checked(tasks: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        WorkerConfig(tasks=tasks)


def test_a_worker_refuses_tasks_the_app_does_not_know(app: Conveyor) -> None:
    @app.task
    def send_email() -> None: ...

    async def main() -> None:
        with pytest.raises(ValueError, match=r"unknown task\(s\) 'nope'.*send_email"):
            await app.run_worker(config=WorkerConfig(queues={"default": 1},
                                                     tasks=["send_email", "nope"]))
        await app.close_async()

    asyncio.run(main())


def test_a_worker_with_tasks_claims_only_those(app: Conveyor) -> None:
    @app.task
    async def mail(n: int) -> None: ...

    @app.task
    async def resize(n: int) -> None: ...

    async def main() -> None:
        m = [await mail.enqueue_async(i) for i in range(5)]
        r = await resize.enqueue_async(0)

        async def mails_done() -> bool:
            jobs = [await app.get_job_async(j.id) for j in m]
            return all(j is not None and j.state == JobState.COMPLETED for j in jobs)

        config = dataclasses.replace(FAST, tasks=["mail"])
        worker = await run_worker_until(app, mails_done, config=config)
        got = await app.get_job_async(r.id)
        assert got is not None and got.state == JobState.AVAILABLE and got.attempt == 0
        assert worker.config.tasks == ("mail",)
        await app.close_async()

    asyncio.run(main())


def test_the_documented_routing_example_runs(db_url: str) -> None:
    doc = Path(__file__).resolve().parents[1] / "docs" / "flow-control.md"
    section = doc.read_text().split("### Routing", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert block is not None
    namespace: dict[str, Any] = {"Conveyor": Conveyor, "url": db_url}
    exec(block.group(1), namespace)
    app = namespace["app"]
    try:
        assert namespace["monthly"].defaults.queue == "slow"
        jobs = app.list_jobs()
        assert {j.requires["gpu"] if j.requires else None for j in jobs} == {"h100", None}
        assert "slow" in {q for q in [namespace["monthly"].enqueue().queue]}
    finally:
        app.close()


def test_every_insert_path_keeps_the_requirement(app: Conveyor) -> None:
    @app.task(requires={"gpu": "a100"})
    def train(n: int) -> None: ...

    @app.task
    def plain(n: int) -> None: ...

    one = train.enqueue(0)
    many = app.enqueue_many([train.job(i) for i in range(3)] + [plain.job(9)])
    ids = app.enqueue_many_ids([train.job(i) for i in range(300)])  # COPY-sized batch
    batch = app.batch([train.job(1), plain.job(2)])
    dep = train.options(depends_on=[one]).enqueue(5)
    jobs = [app.get_job(j.id) for j in [one, *many, batch.jobs[0], dep]]
    jobs += [app.get_job(i) for i in ids[:3]]
    got = [j.requires if j else "missing" for j in jobs]
    assert got == [{"gpu": "a100"}] * 4 + [None, {"gpu": "a100"}, {"gpu": "a100"}] + [
        {"gpu": "a100"}] * 3
    assert app.get_job(batch.jobs[1].id).requires is None  # type: ignore[union-attr]
    # a batch with one requiring job took the general insert: the plain ones there too
    assert [app.get_job(j.id).requires for j in many[3:]] == [None]  # type: ignore[union-attr]


def test_current_job_outside_a_worker_names_this_process(app: Conveyor) -> None:
    seen: dict[str, Any] = {}

    @app.task
    def who() -> None:
        ctx = current_job()
        seen.update(node=ctx.node_id, host=ctx.hostname, pid=ctx.pid, labels=dict(ctx.labels))

    with app.inline():
        who.enqueue()
    assert seen == {"node": None, "host": socket.gethostname(), "pid": os.getpid(),
                    "labels": {}}
