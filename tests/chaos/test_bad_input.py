"""Scenario 12: bad input (both backends).

Rows written straight into the table (malformed JSON, wrong JSON types, unknown tasks,
10 MB and deeply nested payloads, text that is not UTF-8), payloads the API must refuse,
and handlers whose errors or results are hard to store (5 MB messages, NUL bytes, lone
surrogates, exceptions that cannot be printed). The worker survives and goes on, every
bad job ends final with a clear error, stored errors stay bounded.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from conveyor import Conveyor, ConveyorConfig, Job, JobState

from . import app as chaos
from .harness import Cluster, Observer, Result, all_final, check, enqueue, jobs
from .test_processes import backend_of, finish

CFG = ConveyorConfig()
#: Room for the truncation note and the JSON around a capped error or traceback.
SLACK = 200
DEPTH = 5000


def insert_row(url: str, task: str, args: Any, kwargs: Any = "{}") -> int | str:
    """Insert one job row directly; returns its id, or the database's refusal."""
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(url[len("sqlite:///"):], isolation_level=None)
        try:
            row = conn.execute(  # bytes are stored as TEXT that is not UTF-8
                "INSERT INTO conveyor_jobs (task, queue, args, kwargs, max_attempts, scheduled_at,"
                " created_at) VALUES (?, 'default', CAST(? AS TEXT), ?, 2,"
                " (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0)"
                " RETURNING id", (task, args, kwargs)).fetchone()
            return int(row[0])
        finally:
            conn.close()
    text = args.decode("utf-8", "surrogateescape") if isinstance(args, bytes) else args
    try:
        with psycopg.connect(url, autocommit=True) as pg:
            got = pg.execute("INSERT INTO conveyor_jobs (task, queue, args, kwargs, max_attempts)"
                             " VALUES (%s, 'default', %s::jsonb, %s::jsonb, 2) RETURNING id",
                             (task, text, kwargs)).fetchone()
            assert got is not None
            return int(got[0])
    except (psycopg.Error, UnicodeEncodeError) as exc:
        return f"refused by PostgreSQL: {type(exc).__name__}"


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def refused_by_api(url: str, args: tuple[Any, ...]) -> str:
    """What enqueueing ``echo(*args)`` through the public API says."""
    app = Conveyor(url)
    try:
        task = app.task(name="echo")(chaos.echo.fn)
        task.enqueue(*args)
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc)[:160]}"
    finally:
        app.close()
    return "accepted"


def test_bad_input(db_url: str, chaos_dir: Path, started: float,
                   request: pytest.FixtureRequest) -> None:
    deep = "[" * DEPTH + "]" * DEPTH
    direct: dict[str, tuple[str, Any, Any]] = {
        "malformed JSON args": ("echo", '[1, 2', "{}"),
        "args not an array": ("echo", '{"a": 1}', "{}"),
        "kwargs not an object": ("echo", "[]", "[1]"),
        "unknown task": ("no_such_task", "[]", "{}"),
        "10 MB args": ("echo", json.dumps(["z" * 10_000_000]), "{}"),
        f"args nested {DEPTH} deep": ("echo", f"[{deep}]", "{}"),
        "args not UTF-8": ("echo", b'["\xff\xfe bad"]', "{}"),
    }
    rows: dict[str, int | str] = {k: insert_row(db_url, *v) for k, v in direct.items()}
    inserted = {k: v for k, v in rows.items() if isinstance(v, int)}
    api = {
        "10 MB args": refused_by_api(db_url, ("z" * 10_000_000,)),
        f"args nested {DEPTH} deep": refused_by_api(db_url, (nested(DEPTH),)),
        "NUL in args": refused_by_api(db_url, ("nul \x00",)),
        "lone surrogate in args": refused_by_api(db_url, ("lone \ud800",)),
    }
    errors = enqueue(db_url, [chaos.bad_error.job(k) for k in
                              ("huge", "deep", "nul", "surrogate", "unprintable")])
    results = enqueue(db_url, [chaos.bad_result.job(k) for k in ("huge", "nul", "surrogate")])
    with Cluster(db_url, chaos_dir) as cluster, Observer(db_url) as observer:
        # A task no worker knows waits for one that does (rolling deploys), up to
        # --unknown-task-timeout; a short one here, so the row still ends discarded.
        worker = cluster.start("-c", "4", "--unknown-task-timeout", "2", lease_ttl=3.0)
        cluster.wait(lambda: all_final(db_url), 60, "every bad job to end")
        after = enqueue(db_url, [chaos.work.job(0.01) for _ in range(20)])
        cluster.wait(lambda: all_final(db_url), 30, "normal jobs after the bad ones")
        assert worker.poll() is None, "the worker died"
    final = jobs(db_url)
    by_id = {v: k for k, v in inserted.items()}

    def expect(job: Job) -> str | None:
        for entry in job.errors:
            if len(entry.get("error", "")) > CFG.max_error_chars + SLACK:
                return f"stored error of {len(entry['error'])} chars"
            if len(entry.get("traceback", "")) > CFG.max_traceback_chars + SLACK:
                return f"stored traceback of {len(entry['traceback'])} chars"
        label = by_id.get(job.id)
        if label is not None:
            # Bytes that are not UTF-8 read as U+FFFD (SQLite; PostgreSQL refuses them).
            lenient = ("10 MB args", "args not UTF-8")
            want = JobState.COMPLETED if label in lenient else JobState.DISCARDED
            if job.state != want:
                return f"{label}: {job.state}, wanted {want}"
            if want == JobState.DISCARDED and not job.errors:
                return f"{label}: discarded without saying why"
        elif job.id in errors:
            if job.state != JobState.DISCARDED or job.attempt != 2 or len(job.errors) != 2:
                return f"bad error: {job.state} after {job.attempt} attempts, {job.errors!r:.300}"
        elif job.state != JobState.COMPLETED:
            return f"{job.state}, wanted completed"
        return None

    outcome = check(db_url, cluster.events(), [*inserted.values(), *errors, *results, *after],
                    observer, expect)
    notes = {**{k: "refused by the database" for k, v in rows.items() if isinstance(v, str)},
             **{f"API: {k}": v for k, v in api.items()},
             **{k: f"{final[v].state.value}: {_why(final[v])}" for k, v in inserted.items()},
             **{f"result {k}": f"{final[i].state.value}: {json.dumps(final[i].result)[:80]}"
                for k, i in zip(("huge", "nul", "surrogate"), results, strict=True)},
             **{f"error {k}": f"{final[i].state.value}: {_why(final[i])}"
                for k, i in zip(("huge", "deep", "nul", "surrogate", "unprintable"), errors,
                                strict=True)}}
    for label, said in api.items():
        assert said != "accepted", f"the API accepted {label}"
    finish(Result(12, "bad input: malformed rows, huge payloads, unstorable errors and results",
                  backend_of(db_url), len(inserted) + len(errors) + len(results) + len(after),
                  f"{len(direct)} rows written around the API, {len(api)} refused payloads, "
                  "8 handlers with unstorable errors or results", request.node.nodeid, outcome,
                  notes="the worker survived; every bad job ended final with a bounded error",
                  extra=notes), started)


def _why(job: Job) -> str:
    if not job.errors:
        return "(no error)"
    return str(job.errors[-1].get("error", ""))[:100]
