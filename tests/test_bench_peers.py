"""``python -m bench.peers``: the parts checked without any peer installed (options,
the exactly-once check, the aggregation, the tables), then one real run of the
pgqueuer runner beside Conveyor's at a tiny size, in pgqueuer's own venv."""

from __future__ import annotations

import json
import shutil
import socket
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
from bench.peers import __main__ as peers
from bench.peers import _driver, _render, _runner, _services, _systems, _venv


def test_the_defaults_are_the_issues_sizes_and_every_peer() -> None:
    args = peers.parser().parse_args([])
    assert args.pg_admin == "private"
    assert (args.jobs, args.single_jobs, args.bulk_jobs, args.latency_jobs, args.repeat) == (
        20_000, 2_000, 50_000, 200, 3)
    keys = [s.key for s in peers.plan(args)]
    assert keys[:2] == ["conveyor-sqlite", "conveyor-postgres"]
    assert {"pgqueuer", "procrastinate", "chancy", "celery", "dramatiq", "rq", "huey-redis",
            "huey-sqlite", "saq"} <= set(keys)
    for system in _systems.PEERS:  # every peer's venv is pinned to one release
        assert system.version, system.key


def test_peers_and_workloads_are_chosen_and_unknown_names_refused() -> None:
    args = peers.parser().parse_args(["--peers", "pgqueuer,huey", "--conveyor", "postgres",
                                      "--workloads", "bulk,e2e", "--jobs", "500"])
    plan = {s.key: s.workloads for s in peers.plan(args)}
    assert plan == {"conveyor-postgres": ("e2e", "bulk"), "pgqueuer": ("e2e", "bulk"),
                    "huey-redis": ("e2e",), "huey-sqlite": ("e2e",)}  # huey: no bulk API
    for bad in (["--peers", "sidekiq"], ["--conveyor", "mysql"], ["--workloads", "steady"]):
        with pytest.raises(ValueError):
            peers.plan(peers.parser().parse_args(bad))
    with pytest.raises(SystemExit):
        peers.main(["--peers", "sidekiq"])


def test_exactly_once_names_what_was_missing_or_ran_twice() -> None:
    assert _runner.exactly_once(Counter({0: 1, 1: 1}), range(2))["exactly_once"] is True
    twice = _runner.exactly_once(Counter({0: 2, 1: 1}), range(3))
    assert twice["exactly_once"] is False
    assert (twice["missing"], twice["ran_more_than_once"], twice["handler_calls"]) == (1, 1, 3)
    assert _runner.stored(9, 10) == {"exactly_once": False, "stored": 9,
                                     "reason": "9 jobs stored, 10 enqueued"}


def test_a_run_that_fails_its_check_is_reported_failed(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    def lost_one(config: dict[str, Any]) -> dict[str, Any]:
        return {**_runner.rate(3, 0.001), **_runner.exactly_once(Counter({0: 1, 1: 1}), range(3))}

    def broken(config: dict[str, Any]) -> dict[str, Any]:
        raise ConnectionError("refused")

    for workload, reason in (("e2e", "exactly-once check failed"),
                             ("bulk", "ConnectionError: refused")):
        _runner.main({"e2e": lost_one, "bulk": broken}, lambda c: {"versions": {}},
                     ["runner", json.dumps({"workload": workload})])
        line = capsys.readouterr().out.strip().splitlines()[-1]
        result = json.loads(line.removeprefix(_runner.MARK))
        assert (result["ok"], result["reason"]) == (False, reason)


def _run(ok: bool, **figures: float) -> dict[str, Any]:
    return {"ok": ok, **figures} if ok else {"ok": False, "reason": "exactly-once check failed",
                                              **figures}


def _entry(label: str, versions: dict[str, str], **workloads: list[dict[str, Any]]
           ) -> dict[str, Any]:
    return {"label": label, "versions": versions, "settings": {},
            "workloads": {w: _driver.aggregate(w, runs) for w, runs in workloads.items()}}


def sample() -> dict[str, Any]:
    """A result as ``bench.peers`` writes it: Conveyor 4x and 8x pgqueuer end to end."""
    lat = [_run(True, p50_ms=2.0, p99_ms=4.0)]
    systems = {
        "conveyor-sqlite": _entry("Conveyor {version}, SQLite", {"conveyor": "0.1.0"},
                                  e2e=[_run(True, jobs_per_s=20_000.0)], latency=lat),
        "conveyor-postgres": _entry(
            "Conveyor {version}, PostgreSQL", {"conveyor": "0.1.0"},
            e2e=[_run(True, jobs_per_s=10_000.0)], single=[_run(True, jobs_per_s=3000.0)],
            bulk=[_run(True, jobs_per_s=60_000.0)], latency=lat),
        "pgqueuer": _entry(
            "pgqueuer {version} (PostgreSQL, asyncpg)", {"pgqueuer": "1.6.0", "asyncpg": "0.32"},
            e2e=[_run(True, jobs_per_s=2500.0), _run(False, jobs_per_s=99_999.0),
                 _run(True, jobs_per_s=2400.0), _run(True, jobs_per_s=2600.0)],
            single=[_run(True, jobs_per_s=2000.0)], bulk=[_run(True, jobs_per_s=30_000.0)],
            latency=[_run(True, p50_ms=4.0, p99_ms=5.0)]),
        "celery": _entry("celery {version} (Redis, threads pool)", {"celery": "5.7.0"},
                         e2e=[_run(False, jobs_per_s=50.0)]),
        "rq": _entry("rq {version} (Redis, a fork per job)", {"rq": "3.0.0"},
                     e2e=[_run(True, jobs_per_s=100.0, jobs=2000)]),
        "saq": {"label": "saq {version} (Redis)", "failed": "no venv: offline",
                "packages": ["saq[redis]==0.26.4"], "workloads": {}},
    }
    return {"date": "2026-11-28", "conveyor_commit": "0123456789abcdef",
            "machine": {"cores": 2, "cpu": "Xeon", "python": "3.11.7", "sqlite": "3.40.1",
                        "loadavg_1m": 0.5},
            "services": {"postgres": {"server_version": "15.20", "connection": "tcp 127.0.0.1",
                                      "source": "a private cluster started for this run"},
                         "redis": {"version": "7.0.15"}},
            "params": {"jobs": 20_000, "single_jobs": 2000, "bulk_jobs": 50_000,
                       "latency_jobs": 200, "repeat": 3},
            "systems": systems, "failures": _driver.failures(systems)}


def test_a_failed_run_is_no_figure_and_is_listed() -> None:
    result = sample()
    e2e = result["systems"]["pgqueuer"]["workloads"]["e2e"]
    assert (e2e["median"]["jobs_per_s"], e2e["ok_runs"], e2e["failed_runs"]) == (2500.0, 3, 1)
    assert e2e["spread"]["jobs_per_s"] == [2400.0, 2600.0]
    listed = {(f["system"], f["workload"]) for f in result["failures"]}
    assert listed == {("pgqueuer", "e2e"), ("celery", "e2e"), ("saq", None)}
    rows = {line.split(" | ")[0]: line for line in _render.table(result).splitlines()}
    assert "| 2,500 (1 of 4 failed) | 2,000 | 30,000 | 4.0 / 5.0 | 4.0x / 8.0x |" in rows[
        "| pgqueuer 1.6.0 (PostgreSQL, asyncpg)"]
    assert "| failed (1 of 1 failed) | - | - |" in rows["| celery 5.7.0 (Redis, threads pool)"]
    assert "failed: no venv: offline" in rows["| saq 0.26.4 (Redis)"]
    assert "| 100 (2,000 jobs) | - |" in rows["| rq 3.0.0 (Redis, a fork per job)"]


def test_the_readme_section_renders_from_a_result_file(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    path = tmp_path / "peers.json"
    path.write_text(json.dumps(sample()))
    assert peers.main(["--render", str(path)]) == 0
    text = capsys.readouterr().out
    assert "Measured 2026-11-28 on Conveyor `0123456` by `make bench-peers`" in text
    assert ("2-core Xeon, Python 3.11.7, PostgreSQL 15.20 (tcp 127.0.0.1, a private cluster, "
            "default settings), Redis 7.0.15") in text
    assert "| Conveyor 0.1.0, PostgreSQL | 10,000 | 3,000 | 60,000 | 2.0 / 4.0 |  |" in text
    assert ("PostgreSQL e2e 4.00x pgqueuer's (target >= 4: met); SQLite e2e 8.00x pgqueuer's "
            "(target >= 8: met); bulk on PostgreSQL 2.00x pgqueuer's (target >= 3: missed); "
            "single enqueue_async on PostgreSQL 1.50x pgqueuer's (target >= 1.5: met); "
            "p50 on PostgreSQL 0.50x pgqueuer's (target <= 0.7: met); p99 on PostgreSQL 0.80x "
            "pgqueuer's (target <= 1: met).") in text
    assert "Failed runs (no figure taken from them): pgqueuer e2e 2: exactly-once" in text


def test_a_runner_that_prints_no_result_is_a_failure(tmp_path: Path) -> None:
    system = _systems.System("conveyor-sqlite", "conveyor", "x", "no_such_runner",
                             needs=("workdir",))
    ctx = _driver.Context("", None, tmp_path, {"e2e": 10})
    result = _driver.run_once(system, Path(sys.executable), "e2e", ctx)
    assert result["ok"] is False
    assert result["reason"].startswith("no result line: ")
    assert "No module named bench.peers.no_such_runner" in result["reason"]


@pytest.mark.postgres
def test_pgqueuer_beside_conveyor_at_a_tiny_size(postgres_admin_url: str, tmp_path: Path
                                                 ) -> None:
    """The real thing, small: pgqueuer's venv (made from PyPI, or the cached one), its
    runner for every workload, and Conveyor's on SQLite; every run exactly once."""
    pgq = next(s for s in _systems.PEERS if s.key == "pgqueuer")
    try:
        _venv.ensure(pgq, timeout=120)
    except _venv.VenvError as exc:
        pytest.skip(f"!!! NO PGQUEUER VENV: the package registry cannot be reached ({exc}); "
                    f"the peers benchmark is not tested !!!")
    out = tmp_path / "peers.json"
    args = peers.parser().parse_args([
        "--peers", "pgqueuer", "--conveyor", "sqlite", "--jobs", "200", "--single-jobs",
        "50", "--bulk-jobs", "500", "--latency-jobs", "10", "--repeat", "1",
        "--pg-admin", postgres_admin_url, "--out", str(out)])
    result = peers.run(args, log=lambda line: None)
    assert result["failures"] == []
    assert json.loads(out.read_text())["systems"].keys() == {"pgqueuer", "conveyor-sqlite"}
    entry = result["systems"]["pgqueuer"]
    assert entry["versions"]["pgqueuer"] == pgq.version
    assert entry["settings"]["batch_size"] == 10
    for workload in _systems.WORKLOADS:
        (run,) = entry["workloads"][workload]["runs"]
        assert run["ok"] and run["exactly_once"], run
    assert entry["workloads"]["e2e"]["runs"][0]["handler_calls"] == 200
    assert "SQLite e2e" in _render.ratio_line(result)
    with psycopg.connect(postgres_admin_url) as conn:  # its scratch database was dropped
        assert conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s",
                            [_driver.database_name(pgq)]).fetchone() == (0,)


def test_without_a_local_redis_one_is_started_for_the_run(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    if not shutil.which("redis-server"):
        pytest.skip("no redis-server here (the benchmark would apt-get install it)")
    with socket.socket() as sock:  # a port nothing answers on
        sock.bind(("127.0.0.1", 0))
        silent = sock.getsockname()
    monkeypatch.setattr(_services, "LOCAL_REDIS", silent)
    with _services.redis() as info:
        assert "a redis-server started for this run" in info["source"]
        assert info["version"]
        _services.flush_redis(info["url"])
        port = int(info["url"].rsplit(":", 1)[1].split("/")[0])
        assert _services.redis_answers("127.0.0.1", port)
    assert not _services.redis_answers("127.0.0.1", port)
