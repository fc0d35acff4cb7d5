"""Issue 28, defect 4: ids past the 64-bit range in the Python API name no job (or
batch), as the CLI and the dashboard already say, instead of SQLite's OverflowError or
psycopg's NumericValueOutOfRange; the FastAPI example answers 404. Both backends."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from conveyor import BatchNotFoundError, Conveyor, JobNotFoundError, WorkerConfig

from .contrib.test_starlette import load_example, served

MAX_ID = 2**63 - 1
PAST = (2**63, 2**64, 10**30)


def test_get_job_and_get_batch_past_the_range_find_nothing(app: Conveyor) -> None:
    app.task(name="noop")(lambda: None).enqueue()
    assert app.get_job(MAX_ID) is None and app.get_batch(MAX_ID) is None
    for past in PAST:
        assert app.get_job(past) is None
        assert app.get_batch(past) is None

    async def main() -> None:
        try:
            for past in PAST:
                assert await app.get_job_async(past) is None
                assert await app.get_batch_async(past) is None
        finally:
            await app.close_async()

    asyncio.run(main())


def test_actions_on_an_id_past_the_range_raise_not_found(app: Conveyor) -> None:
    app.task(name="noop")(lambda: None).enqueue()
    actions: list[Callable[[int], Any]] = [
        app.cancel_job, app.retry_job, app.explain_job, app.discard_job, app.delete_job,
        app.wait_job, app.job_dependencies]
    for past in PAST:
        for action in actions:
            with pytest.raises(JobNotFoundError, match=f"no job with id {past}"):
                action(past)
        with pytest.raises(JobNotFoundError):
            app.wait_jobs([past], timeout=1)
        for batch_action in (app.batch_close, lambda i: app.batch_add(i, [])):
            with pytest.raises(BatchNotFoundError, match=f"no batch has id {past}"):
                batch_action(past)
    async_actions: list[Callable[[int], Awaitable[Any]]] = [
        app.cancel_job_async, app.retry_job_async, app.explain_job_async,
        app.discard_job_async, app.delete_job_async, app.wait_job_async]

    async def main() -> None:
        try:
            for action in async_actions:
                with pytest.raises(JobNotFoundError):
                    await action(2**63)
        finally:
            await app.close_async()

    asyncio.run(main())


def test_list_jobs_before_an_id_past_the_range_lists_every_job(app: Conveyor) -> None:
    noop = app.task(name="noop")(lambda: None)
    ids = [noop.enqueue().id for _ in range(3)]
    everything = [j.id for j in app.list_jobs()]
    assert sorted(everything) == ids
    for past in (MAX_ID, *PAST):
        assert [j.id for j in app.list_jobs(before_id=past)] == everything

    async def main() -> None:
        try:
            assert [j.id for j in await app.list_jobs_async(before_id=2**64)] == everything
        finally:
            await app.close_async()

    asyncio.run(main())
    with pytest.raises(TypeError):
        app.list_jobs(before_id=0)


def test_the_fastapi_example_answers_404_past_the_range(
        db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    example = load_example(db_url, monkeypatch, tmp_path)
    api = example.create_api(example.queue, worker=WorkerConfig(queues={"default": 1}))
    with served(api) as client:
        for past in PAST:
            response = client.get(f"/jobs/{past}")
            assert response.status_code == 404, response.text
            assert "Traceback" not in response.text
        assert client.get("/jobs/1").status_code == 404
