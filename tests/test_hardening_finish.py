"""Issue 28, defect 1: an attempt whose finishing raises (encoding the result, a hook,
building the ack) ends with that error recorded; no worker, burst or not, exits with a
job of its own still ``running``. Real workers, both backends."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import conveyor
from conveyor import Conveyor, JobState, _payload
from conveyor._runtime.executor import Executor

from ._runtime_util import burst

SRC = Path(conveyor.__file__).resolve().parents[1]

UNSTORABLE_APP = textwrap.dedent("""
    from conveyor import Conveyor

    app = Conveyor()


    class Point:
        def __init__(self, x):
            self.x = x


    def broken_encoder(point):
        raise RuntimeError("the Point encoder broke")


    app.register_type(Point, broken_encoder, lambda v: Point(v), tag="point")


    @app.add_middleware
    async def rewrap(job, call_next):
        result = await call_next()
        return Point(result) if job.task == "wrapped" else result


    @app.task(name="deep", max_attempts=3)
    def deep():
        value = []
        for _ in range(5000):
            value = [value]
        return value


    @app.task(name="point", max_attempts=3)
    def point():
        return Point(1)


    @app.task(name="wrapped", max_attempts=3)
    def wrapped():
        return 2
""")


def test_a_burst_worker_ends_every_attempt_whose_result_cannot_be_stored(
        app: Conveyor, db_url: str, tmp_path: Path) -> None:
    """A result nested 5,000 deep (RecursionError), a registered encoder that raises,
    and a middleware that returns such a value: each job ends ``completed`` with the
    error noted in place of its result (as a NaN result), none left ``running``."""
    (tmp_path / "unstorable_app.py").write_text(UNSTORABLE_APP)
    ids = {name: app.task(name=name, max_attempts=3)(lambda: None).enqueue().id
           for name in ("deep", "point", "wrapped")}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(tmp_path)]),
           "CONVEYOR_URL": db_url}
    proc = subprocess.run(
        [sys.executable, "-m", "conveyor", "worker", "unstorable_app:app", "--burst"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = {"deep": "RecursionError", "point": "the Point encoder broke",
                "wrapped": "the Point encoder broke"}
    for name, job_id in ids.items():
        job = app.get_job(job_id)
        assert job is not None
        assert job.state is JobState.COMPLETED, (name, job.state, proc.stderr[-3000:])
        assert isinstance(job.result, dict) and expected[name] in job.result["error"], job.result
        assert "unserialisable_result" in job.result
        assert job.attempt == 1, (name, job.attempt)
    assert "crashed" not in proc.stderr, proc.stderr[-3000:]


def test_an_ack_that_cannot_be_built_fails_the_attempt_with_its_error(
        app: Conveyor, monkeypatch: pytest.MonkeyPatch) -> None:
    """Building the completed outcome raises (a bug of ours, stood in for here): the
    attempt fails with that error recorded and is retried as any failure would be."""

    @app.task(max_attempts=2, backoff=lambda attempt: 0.0)
    def fine() -> int:
        return 1

    real = _payload.encode_result
    calls = {"n": 0}

    def first_breaks(value: Any, *args: Any) -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("building the ack broke")
        text: str = real(value, *args)
        return text

    monkeypatch.setattr(_payload, "encode_result", first_breaks)
    job = fine.enqueue()
    burst(app)
    done = app.get_job(job.id)
    assert done is not None and done.state is JobState.COMPLETED, done
    assert done.attempt == 2 and done.result == 1
    assert len(done.errors) == 1
    assert "finishing the attempt failed: RuntimeError: building the ack broke" in \
        done.errors[0]["error"]


def test_an_execution_that_crashes_still_ends_its_attempt(
        app: Conveyor, monkeypatch: pytest.MonkeyPatch) -> None:
    """Even when the executor itself raises, the worker writes the attempt's failure
    (discarded at its last attempt) instead of leaving the job ``running``."""

    @app.task(max_attempts=1)
    def fine() -> int:
        return 1

    async def crash(self: Executor, ex: Any) -> None:
        raise ZeroDivisionError("the executor broke")

    monkeypatch.setattr(Executor, "execute", crash)
    job = fine.enqueue()
    burst(app)
    done = app.get_job(job.id)
    assert done is not None and done.state is JobState.DISCARDED, done
    assert "ZeroDivisionError: the executor broke" in done.errors[-1]["error"]
