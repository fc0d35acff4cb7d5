"""/metrics (valid Prometheus text with real numbers), /healthz (turns unhealthy when
the database goes away or its schema is behind), `conveyor check` and `conveyor status`."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner, Result
from prometheus_client.parser import text_string_to_metric_families
from psycopg import sql

from conveyor import Conveyor
from conveyor.cli import cli

from .. import _pg
from .._runtime_util import FAST, run_worker_until
from ..conftest import WaitFor
from ._seed import make_app
from .conftest import browser_for


def families(text: str) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_metrics_is_valid_prometheus_text(world: Conveyor) -> None:
    @world.task(name="ping", queue="default")
    def ping() -> None: ...

    world.enqueue_many([ping.job() for _ in range(3)])
    asyncio.run(_drain(world))
    for b in browser_for(world):
        response = b.get("/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
        text = response.text
    found = families(text)
    assert {"conveyor_jobs_finished", "conveyor_job_run_seconds",
            "conveyor_job_queue_latency_seconds", "conveyor_queue_jobs", "conveyor_workers",
            "conveyor_build_info"} <= set(found)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in found.values() for s in f.samples}  # type: ignore[attr-defined]
    key = ("conveyor_jobs_finished_total",
           (("outcome", "completed"), ("queue", "default"), ("task", "ping")))
    assert samples[key] == 3
    count = samples[("conveyor_job_run_seconds_count", (("queue", "default"), ("task", "ping")))]
    inf = samples[("conveyor_job_run_seconds_bucket",
                   (("le", "+Inf"), ("queue", "default"), ("task", "ping")))]
    assert count == inf == 3
    buckets = [s.value for s in found["conveyor_job_run_seconds"].samples  # type: ignore[attr-defined]
               if s.name.endswith("_bucket") and s.labels["task"] == "ping"]
    assert buckets == sorted(buckets), "cumulative buckets never decrease"
    assert samples[("conveyor_queue_jobs", (("queue", "mail"), ("state", "available")))] == 2
    assert samples[("conveyor_queue_jobs", (("queue", "billing"), ("state", "retryable")))] == 4
    for line in text.splitlines():  # every sample line is name{labels} value
        assert line.startswith("#") or " " in line


async def _drain(app: Conveyor) -> None:
    try:
        await run_worker_until(app, all_final_default(app),
                               config=dataclasses.replace(FAST, queues={"default": 4}))
    finally:
        await app.close_async()


def all_final_default(app: Conveyor):
    async def check() -> bool:
        return (await app.count_jobs_async(queue="default"))["available"] == 0

    return check


def test_label_values_are_escaped() -> None:
    from conveyor._app import MetricTotal
    from conveyor.contrib import prometheus

    snapshot = prometheus.Snapshot([MetricTotal('q"1', "t\\x\n", "completed", 2)], [], ['q"1'], 0)
    text = prometheus.exposition(prometheus.families(snapshot, "1")).decode()
    found = families(text)
    sample = found["conveyor_jobs_finished"].samples[0]  # type: ignore[attr-defined]
    assert sample.labels == {"queue": 'q"1', "task": "t\\x\n", "outcome": "completed"}


def scrape_of_every_kind() -> object:
    """A snapshot with every kind of sample: escapes, a large counter, histograms with
    fractional sums, gauges per queue and state, a final state that is not exported."""
    from conveyor import JobState
    from conveyor._app import MetricTotal, StateCount
    from conveyor._app.reads import Snapshot

    totals = [MetricTotal('q"1', "t\\x\n", "completed", 2),
              MetricTotal("big", "t", "completed", 123456789.0),
              MetricTotal("big", "t", "discarded", 0.5),
              MetricTotal("big", "t", "runtime_count", 3), MetricTotal("big", "t", "runtime_b0", 1),
              MetricTotal("big", "t", "runtime_b14", 2), MetricTotal("big", "t", "runtime_sum", 0.1),
              MetricTotal("big", "t", "latency_count", 1), MetricTotal("big", "t", "latency_b7", 1),
              MetricTotal("big", "t", "latency_sum", 1e-7)]
    counts = [StateCount("big", JobState.AVAILABLE, 7), StateCount("big", JobState.RUNNING, 1),
              StateCount(None, JobState.COMPLETED, 100_000, True)]
    return Snapshot(totals, counts, ["big", 'q"1', "idle"], 2)


@pytest.mark.parametrize("up", [True, False])
def test_the_dashboard_writes_the_families_as_prometheus_client_does(up: bool) -> None:
    """``/metrics`` renders the text format itself (the web extra needs no
    prometheus-client): byte for byte what prometheus-client makes of the collector's
    families, which are the same plain data."""
    from prometheus_client import CollectorRegistry, generate_latest

    from conveyor._app import reads
    from conveyor.contrib import prometheus
    from conveyor.web._exposition import exposition

    snapshot = scrape_of_every_kind() if up else None
    ours = exposition(reads.families(snapshot, "9.9"))  # type: ignore[arg-type]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(prometheus._Fixed(prometheus.families(snapshot, "9.9")))  # type: ignore[arg-type]
    assert ours == generate_latest(registry)
    text = ours.decode()
    assert ("conveyor_database_up 1.0" if up else "conveyor_database_up 0.0") in text
    if up:
        assert 'conveyor_jobs_finished_total{outcome="completed",queue="big",task="t"} 1.23456789e+08' in text
        assert 'conveyor_job_run_seconds_bucket{le="+Inf",queue="big",task="t"} 3.0' in text
        assert 'conveyor_queue_jobs{queue="idle",state="scheduled"} 0.0' in text
        labels = [s.labels for s in families(text)["conveyor_jobs_finished"].samples]  # type: ignore[attr-defined]
        assert {"queue": 'q"1', "task": "t\\x\n", "outcome": "completed"} in labels


# -- health ----------------------------------------------------------------------------------


@contextlib.contextmanager
def disposable_db(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A database of its own, migrated, that the test may destroy."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'gone.db'}"
        return
    admin = request.getfixturevalue("postgres_admin_url")
    with _pg.scratch_database(admin, "conveyor_gone") as url:
        yield url


def destroy(url: str, request: pytest.FixtureRequest) -> None:
    if url.startswith("sqlite"):
        path = url.removeprefix("sqlite:///")
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path + suffix)
        return
    admin = request.getfixturevalue("postgres_admin_url")
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_healthz_turns_unhealthy_when_the_database_goes_away(
        backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    with disposable_db(backend, tmp_path, request) as url:
        app = Conveyor(url)
        app.migrate()
        try:
            for b in browser_for(app):
                ok = b.get("/healthz")
                assert ok.status_code == 200 and ok.json()["status"] == "ok"
                assert _check(url).exit_code == 0
                destroy(url, request)
                gone = b.get("/healthz")
                assert gone.status_code == 503
                assert gone.json() == {"status": "unhealthy", "database": "unreachable"}
                assert _check(url).exit_code == 1
        finally:
            app.close()


def _check(url: str, *extra: str) -> Result:
    return CliRunner().invoke(cli, ["check", "--url", url, *extra])


def test_healthz_and_check_report_an_outdated_schema(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    app = Conveyor(url)
    app.migrate()
    with contextlib.closing(sqlite3.connect(tmp_path / "old.db")) as conn, conn:
        conn.execute("DELETE FROM conveyor_migrations WHERE version = "
                     "(SELECT max(version) FROM conveyor_migrations)")
    try:
        for b in browser_for(app):
            response = b.get("/healthz")
            assert response.status_code == 503 and "expected" in response.json()["schema"]
    finally:
        app.close()
    result = CliRunner().invoke(cli, ["check", "--url", url, "--json"])
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["status"] == "unhealthy" and doc["schema"] == doc["expected_schema"] - 1


def test_check_can_require_live_workers(db_url: str) -> None:
    assert _check(db_url).exit_code == 0
    result = CliRunner().invoke(cli, ["check", "--url", db_url, "--min-workers", "1", "--json"])
    assert result.exit_code == 1 and json.loads(result.stdout)["workers"] == 0
    assert _check("nosuch://x").exit_code == 1


def test_status_prints_a_terminal_overview(world: Conveyor, db_url: str) -> None:
    result = CliRunner().invoke(cli, ["status", "--url", db_url])
    assert result.exit_code == 0, result.output
    for text in ("Jobs", "discarded", "Queues", "billing", "mail", "Last hour"):
        assert text in result.stdout
    doc = json.loads(CliRunner().invoke(cli, ["status", "--url", db_url, "--json"]).stdout)
    assert doc["states"]["discarded"] == {"count": 7, "capped": False}
    assert {q["name"] for q in doc["queues"]} >= {"billing", "default", "mail"}


def test_dashboard_command_needs_a_reachable_database(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["dashboard", "--url", "postgresql://x@127.0.0.1:1/none"])
    assert result.exit_code == 3


def test_workers_page_shows_live_nodes_and_the_leader(db_url: str, wait_for: WaitFor) -> None:
    """The leader badge is on the leader's row and on no other (the page's note mentions
    "leader" whatever the rows say)."""
    from ._seed import add_follower_node, leader_rows, live_worker

    app = make_app(db_url)
    try:
        with live_worker(app) as worker:
            follower = add_follower_node(db_url)
            reader = Conveyor(db_url)
            try:
                wait_for(lambda: (leader := reader.get_leader()) is not None
                         and leader.node_id == worker.node_id, timeout=20,
                         message="the live worker to be elected leader")
            finally:
                reader.close()
            for b in browser_for(app):
                rows = leader_rows(b.get("/workers").text)
                assert rows == {worker.node_id: True, follower: False}
    finally:
        app.close()

