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

QUICK_CASES = "w1_bulk_b1000,w2_single,w3_burndown,w4,w5,w6,w7,w9,w10"


def _check_results(out: Path, backend: str, cases: set[str],
                   row: str = "w3_burndown_c10") -> None:
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
    assert "| case | backend |" in summary and f"{row} | {backend}" in summary


def workflow_cases(backend: str) -> set[str]:
    return {f"{backend}_w10_workflow_{c}" for c in ("fan_in", "dag", "batches", "completion_cost")}


def _check_workflow_results(out: Path, backend: str) -> None:
    """Workload 9: every callback ran once, and the completion cost has all four drains."""
    batches = json.loads((out / f"{backend}_w10_workflow_batches.json").read_text())["runs"][0]
    assert batches["callback_runs"] == batches["callbacks"] == 2 * batches["batches"], batches
    assert batches["batches_finished"] == batches["batches"], batches
    cost = json.loads((out / f"{backend}_w10_workflow_completion_cost.json").read_text())["runs"][0]
    for kind in ("independent", "one_dependent", "fan_in_small", "fan_in_large"):
        assert cost[f"jobs_per_s_{kind}"] > 0, (kind, cost)
    assert isinstance(cost["ack_cost_us"], float) and cost["fan_in_large_vs_small"] > 0, cost
    fan_in = json.loads((out / f"{backend}_w10_workflow_fan_in.json").read_text())["runs"][0]
    assert fan_in["enqueue_s"] > 0 and fan_in["worker_exit"] == 0, fan_in


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
        "sqlite_w6_backlog_c100", "sqlite_w7_retry_c100", "sqlite_w8_memory",
        *workflow_cases("sqlite")})
    _check_workflow_results(out, "sqlite")
    steady = json.loads((out / "sqlite_w4_steady.json").read_text())["runs"][0]
    assert steady["acked"] > 0 and steady["table"]["db_bytes"] > 0


@pytest.mark.postgres
def test_quick_suite_on_postgres(tmp_path: Path, postgres_db_url: str) -> None:
    out = tmp_path / "results"
    code = suite.main(["--quick", "--backends", "postgres", "--pg-url", postgres_db_url,
                       "--repeat", "1", "--out", str(out), "--cases", "w1_bulk_b1000,w3,w5,w10"])
    assert code == 0
    _check_results(out, "postgres", {"postgres_w1_bulk_b1000", "postgres_w3_burndown_c10",
                                     "postgres_w5_latency_cross_process",
                                     *workflow_cases("postgres")})
    _check_workflow_results(out, "postgres")
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


@pytest.mark.postgres
def test_many_workers_on_postgres(tmp_path: Path, postgres_db_url: str) -> None:
    """Workload 9 in its quick mode: two burst workers share the jobs exactly once, each
    holds its own connections, and a batch wakes each waiting process about once."""
    out = tmp_path / "results"
    code = suite.main(["--quick", "--backends", "postgres,sqlite", "--pg-url",
                       postgres_db_url, "--repeat", "1", "--out", str(out),
                       "--workdir", str(tmp_path / "work"), "--cases", "w9"])
    assert code == 0
    assert not list(out.glob("sqlite_w9*")), "workload 9 is a PostgreSQL case"
    _check_results(out, "postgres", {"postgres_w9_workers_p1", "postgres_w9_workers_p2",
                                     "postgres_w9_workers_steady_p2"}, "w9_workers_p2")
    two = json.loads((out / "postgres_w9_workers_p2.json").read_text())["runs"][0]
    assert two["processes"] == 2 and sum(two["jobs_per_process"]) == two["jobs"]
    assert two["connections_peak_per_process"] >= 1
    assert two["connections_peak_total"] > two["connections_peak_per_process"]
    assert 0 <= two["empty_claims_per_job"] < 1
    steady = json.loads((out / "postgres_w9_workers_steady_p2.json").read_text())["runs"][0]
    assert steady["drained"] is True and steady["batches"] > 0
    assert 0.5 <= steady["wakes_per_batch_per_process"] <= 3, steady
    assert "## Many workers" in (out / "summary.md").read_text()


@pytest.mark.postgres
def test_capacity_and_model_on_postgres(tmp_path: Path, postgres_db_url: str) -> None:
    """bench.capacity at tiny sizes: sizes per state mix, WAL per phase, the worker's
    connections; bench.model turns them into a capacity table that scales with the rate."""
    from bench import capacity, model

    results = tmp_path / "results"
    out = results / "capacity.json"
    assert capacity.main(["--rows", "2000", "--burndown-jobs", "500", "--pg-url",
                          postgres_db_url, "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    mixes = doc["bytes_per_million_jobs"]
    assert set(mixes) == set(capacity.MIXES)
    for mix in mixes.values():
        assert mix["heap_bytes"] > 0 and mix["index_bytes"]["conveyor_jobs_pkey"] > 0
        assert mix["total_bytes"] == (mix["heap_bytes"] + mix["toast_bytes"]
                                      + mix["indexes_total_bytes"])
    # a 1 kB traceback per row costs more than a completed row's null result
    assert (mixes["discarded (one error with a 1 kB traceback)"]["heap_bytes"]
            > mixes["completed"]["heap_bytes"])
    life = doc["lifecycle"]
    assert life["completed"] == life["pruned"] == 500
    assert all(phase["bytes"] > 0 for phase in life["wal_per_job"].values()), life
    assert 1 <= life["connections_peak"] <= doc["connections_per_process"][
        "worker process, at most"]
    costs = model.Costs.load(results)
    one, ten = (model.scenario(costs, rate, 3600) for rate in (1_000, 10_000))
    assert ten["wal_mb_per_s"] == pytest.approx(10 * one["wal_mb_per_s"], rel=0.05)
    assert ten["worker_processes"] >= one["worker_processes"]
    assert "| jobs/s |" in model.markdown(costs, [one, ten], 1)


@pytest.mark.postgres
def test_burndown_floor_on_postgres(postgres_db_url: str, tmp_path: Path) -> None:
    """The raw claim/ack loop drains every job once in each variant."""
    from bench import floor
    from bench._targets import Target

    target = Target.postgres(postgres_db_url, tmp_path)
    try:
        result = floor.claim_ack_loop(target, rows=500, batches=(100,))
    finally:
        target.close()
    variants = {k: v for k, v in result.items() if k != "rows"}
    assert set(variants) == {"sequential_b100", "overlapped_b100", "overlapped_b100_all_columns",
                             "overlapped_b100_ack_in_place"}
    for name, figures in variants.items():
        assert figures["acked"] == 500 and figures["jobs_per_s"] > 0, (name, figures)


def test_sqlite_floor_runs_the_workers_ack() -> None:
    """The SQLite floor acks with the statements a worker at the default archive_after
    runs (it raises unless each batch moves to history whole), and its in-place variant."""
    from bench import probes

    for in_place in (False, True):
        figures = probes._sqlite_once(None, 300, in_place=in_place)
        assert set(figures) == {"insert_us", "claim_us", "ack_us"}
        assert all(v > 0 for v in figures.values()), (in_place, figures)


@pytest.mark.postgres
def test_single_enqueue_floor_on_postgres(postgres_db_url: str, tmp_path: Path) -> None:
    """bench-quick's single-enqueue floor stores every row it times, on both kinds of
    psycopg connection, and leaves the database empty."""
    from bench import floor_enqueue
    from bench._targets import Target

    target = Target.postgres(postgres_db_url, tmp_path)
    try:
        result = floor_enqueue.single_insert(target, count=30, warm=5)
        left = target.query("SELECT count(*) FROM conveyor_jobs")[0][0]
    finally:
        target.close()
    for kind in ("async", "sync"):
        assert result[kind]["stored"] == 35 and result[kind]["exactly_once"], result
        assert result[kind]["jobs_per_s"] > 0 and result[kind]["client_cpu_us_per_job"] > 0, result
    assert left == 0


def test_capacity_and_model_refuse_bad_input(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Bad sizes and rates are usage errors (exit 2) before any database is touched; a
    model with nothing measured says what to run."""
    from bench import capacity, model

    for argv in (["--rows", "0"], ["--rows", "many"], ["--burndown-jobs", "-5"]):
        with pytest.raises(SystemExit) as exit_info:
            capacity.main([*argv, "--pg-url", "postgresql://nobody@127.0.0.1:1/none_bench"])
        assert exit_info.value.code == 2, argv
    assert "at least 1" in capsys.readouterr().err
    for argv in (["--rates", "fast"], ["--rates", "0"], ["--handler-ms", "0"]):
        with pytest.raises(SystemExit) as exit_info:
            model.main([*argv, "--results", str(tmp_path)])
        assert exit_info.value.code == 2, argv
    with pytest.raises(SystemExit, match=r"capacity\.json is missing: run `python -m bench"):
        model.main(["--results", str(tmp_path)])


@pytest.mark.postgres
def test_dashboard_and_reads_on_a_simulated_replica(postgres_db_url: str) -> None:
    """docs/scaling.md's read-replica advice: every dashboard page and the read calls
    work on connections that refuse writes (as a hot standby's do), and the simulation
    checks that writes really are refused there."""
    from bench import read_replica

    result = read_replica.check(postgres_db_url)
    assert result["writes_refused"] is True
    assert set(result["pages"].values()) == {200}, result["pages"]
    assert set(result["calls"].values()) == {"ok"}, result["calls"]
    assert result["all_ok"] is True
