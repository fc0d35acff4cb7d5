"""The benchmark suite and ``conveyor bench`` work: tiny sizes, sane JSON, no timing.

Nothing here asserts a speed: the machine may be busy. Figures come from ``make bench``.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from bench import __main__ as suite
from click.testing import CliRunner

from conveyor import Conveyor
from conveyor.cli import cli
from conveyor.cli.bench import QUEUE

QUICK_CASES = "w1_bulk_b1000,w2_single,w3_burndown,w4,w5,w6,w7"


def _check_results(out: Path, backend: str, cases: set[str]) -> None:
    docs = {p.stem: json.loads(p.read_text()) for p in out.glob(f"{backend}_*.json")}
    assert cases <= set(docs), sorted(docs)
    for name, doc in docs.items():
        env = doc["environment"]
        assert env["machine"]["cores"] >= 1 and env["machine"]["python"], name
        assert env["database"], name
        assert doc["runs"] and doc["median"] and doc["command"], name
        for run in doc["runs"]:
            if "exactly_once" in run:
                assert run["exactly_once"] is True, (name, run)
            if "jobs_per_s" in run and "steady" not in name:
                assert run["jobs_per_s"] > 0, (name, run)
            if "round_trips_per_job" in run and "burndown" in name:
                assert 0 < run["round_trips_per_job"] < 1, (name, run)
            if "p50_ms" in run:
                assert 0 <= run["p50_ms"] <= run["p99_ms"] < 10_000, (name, run)
            if "worker_exit" in run:
                assert run["worker_exit"] == 0, (name, run)
    summary = (out / "summary.md").read_text()
    assert "| case | backend |" in summary and f"w3_burndown_c10 | {backend}" in summary


def test_quick_suite_on_sqlite(tmp_path: Path) -> None:
    out = tmp_path / "results"
    code = suite.main(["--quick", "--backends", "sqlite", "--repeat", "1", "--out", str(out),
                       "--workdir", str(tmp_path / "work"), "--steady-seconds", "3",
                       "--cases", QUICK_CASES])
    assert code == 0
    _check_results(out, "sqlite", {
        "sqlite_w1_bulk_b1000", "sqlite_w2_single_t1", "sqlite_w2_single_t8",
        "sqlite_w3_burndown_c10", "sqlite_w3_burndown_sync_c100", "sqlite_w4_steady",
        "sqlite_w5_latency_in_process", "sqlite_w5_latency_cross_process",
        "sqlite_w6_backlog_c100", "sqlite_w7_retry_c100", "sqlite_w8_memory"})
    steady = json.loads((out / "sqlite_w4_steady.json").read_text())["runs"][0]
    assert steady["acked"] > 0 and steady["table"]["db_bytes"] > 0


@pytest.mark.postgres
def test_quick_suite_on_postgres(tmp_path: Path, postgres_db_url: str) -> None:
    out = tmp_path / "results"
    code = suite.main(["--quick", "--backends", "postgres", "--pg-url", postgres_db_url,
                       "--repeat", "1", "--out", str(out), "--cases", "w1_bulk_b1000,w3,w5"])
    assert code == 0
    _check_results(out, "postgres", {"postgres_w1_bulk_b1000", "postgres_w3_burndown_c10",
                                     "postgres_w5_latency_cross_process"})
    doc = json.loads((out / "postgres_w1_bulk_b1000.json").read_text())
    assert "server_version" in doc["environment"]["database"]


def test_conveyor_bench_leaves_other_jobs_alone(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'user.db'}"
    app = Conveyor(url)

    @app.task(queue="mail")
    def send(to: str) -> None: ...

    mine = send.enqueue("a@b.c")
    app.close()
    result = CliRunner().invoke(cli, ["bench", "--url", url, "--jobs", "300", "--json"])
    assert result.exit_code == 0, result.output
    results = json.loads(result.stdout)
    assert [r["workload"] for r in results] == ["bulk", "single", "e2e", "latency"]
    e2e = results[2]
    assert e2e["exactly_once"] is True and e2e["jobs"] == 300 and e2e["jobs_per_s"] > 0
    conn = sqlite3.connect(tmp_path / "user.db")
    try:
        rows = conn.execute("SELECT id, queue, state FROM conveyor_jobs").fetchall()
    finally:
        conn.close()
    assert rows == [(mine.id, "mail", "available")]
    assert QUEUE == "conveyor-bench"
