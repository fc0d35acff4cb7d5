"""The `conveyor` command line: exit codes, JSON output, demo, and real worker processes.

Fast paths use click's CliRunner; the documented behaviours that depend on a real
process (exit codes, stderr without tracebacks, signals) run `python -m conveyor`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from conveyor import Conveyor, JobState, WorkerConfig
from conveyor._storage import load_migrations
from conveyor.cli import EXIT_CODES, cli
from conveyor.cli._logging import JsonFormatter, TextFormatter
from conveyor.cli.worker import parse_queues

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
APP = "tests.apps.cli_app:app"
DEAD_PG = "postgresql://postgres@127.0.0.1:1/x"


# -- helpers -----------------------------------------------------------------------------------


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CONVEYOR_URL", "CONVEYOR_APP")}
    paths = [str(SRC), str(ROOT), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env["COLUMNS"] = "200"
    env.update(extra)
    return env


def run_cli(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m conveyor ARGS` in ``cwd``, with a deadline."""
    return subprocess.run(
        [sys.executable, "-m", "conveyor", *args], cwd=cwd, env=cli_env(**env),
        capture_output=True, text=True, timeout=90, check=False,
    )


def run_json(cwd: Path, *args: str, **env: str) -> Any:
    proc = run_cli(cwd, *args, "--json", **env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def invoke(*args: str, **env: str) -> Result:
    """In-process run; CONVEYOR_URL/APP of the outer shell never leak in."""
    full_env: dict[str, str | None] = {"CONVEYOR_URL": None, "CONVEYOR_APP": None,
                                       "COLUMNS": "200", **env}
    return CliRunner(env=full_env).invoke(cli, list(args), catch_exceptions=False)


def assert_one_line_error(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("Error: ")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'cli.db'}"


def _placeholder(*args: Any, **kwargs: Any) -> None:
    """Producer-side stand-in for a task only the worker's app defines."""


# -- exit codes and errors ----------------------------------------------------------------


def test_exit_codes_are_documented_in_every_help() -> None:
    assert sorted(EXIT_CODES) == [0, 1, 2, 3, 4]
    commands = [[], ["worker"], ["migrate"], ["enqueue"], ["demo"], ["jobs"],
                ["jobs", "list"], ["jobs", "show"], ["jobs", "retry"], ["jobs", "cancel"]]
    for command in commands:
        result = invoke(*command, "--help")
        assert result.exit_code == 0, command
        assert "Exit codes:" in result.stdout, command
        for code in EXIT_CODES:
            assert f"  {code}  " in result.stdout, command
    assert invoke("--version").stdout.startswith("conveyor, version")


@pytest.mark.parametrize("app_path", ["no_such_module_xyz:app", "tests.apps.cli_app",
                                      "tests.apps.cli_app:missing",
                                      "tests.apps.cli_app:not_an_app"])
def test_bad_app_path_exits_2(tmp_path: Path, app_path: str) -> None:
    proc = run_cli(tmp_path, "worker", app_path, "--burst")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "Error:" in proc.stderr


@pytest.mark.parametrize("command", [
    ["jobs", "list"], ["jobs", "show", "1"], ["migrate"], ["migrate", "--dry-run"],
    ["enqueue", "some_task"], ["worker", APP, "--burst"],
])
def test_unreachable_postgres_exits_3_with_one_line(tmp_path: Path, command: list[str]) -> None:
    proc = run_cli(tmp_path, *command, "--url", DEAD_PG)
    assert proc.returncode == 3, proc.stderr
    assert_one_line_error(proc)
    assert "127.0.0.1" in proc.stderr


@pytest.mark.parametrize("url", ["sqlite:///", "nosuch://db", "sqlite:////no/such/dir/x.db"])
@pytest.mark.parametrize("via_env", [False, True])
def test_bad_url_exits_3(tmp_path: Path, url: str, via_env: bool) -> None:
    flags, env = ([], {"CONVEYOR_URL": url}) if via_env else (["--url", url], {})
    proc = run_cli(tmp_path, "jobs", "list", *flags, **env)
    assert proc.returncode == 3, proc.stderr
    assert_one_line_error(proc)


@pytest.mark.parametrize("args", [
    ["jobs", "list", "--state", "weird"], ["jobs", "show", "0"], ["worker"],
    ["worker", APP, "--lease-ttl", "1", "--heartbeat-interval", "2"],
    ["worker", APP, "-q", "bad queue!"], ["enqueue", "bad name!"],
])
def test_usage_errors_exit_2(sqlite_url: str, args: list[str]) -> None:
    assert invoke(*args, "--url", sqlite_url).exit_code == 2


@pytest.mark.parametrize("flags", [["--args", "[1"], ["--args", "{}"], ["--kwargs", "[]"],
                                   ["--kwargs", "nope"]])
def test_enqueue_bad_json_exits_2(tmp_path: Path, sqlite_url: str, flags: list[str]) -> None:
    proc = run_cli(tmp_path, "enqueue", "send", *flags, "--url", sqlite_url)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert flags[0] in proc.stderr


def test_schema_not_migrated_exits_4(tmp_path: Path, sqlite_url: str) -> None:
    """A schema newer than this Conveyor is a SchemaError (exit 4) on any command."""
    invoke("migrate", "--url", sqlite_url)
    with closing(sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))) as conn, conn:
        conn.execute("INSERT INTO conveyor_migrations VALUES (999, 'future', 0)")
    proc = run_cli(tmp_path, "jobs", "list", "--url", sqlite_url)
    assert proc.returncode == 4, proc.stderr
    assert_one_line_error(proc)


# -- migrate -----------------------------------------------------------------------------


def test_migrate_dry_run_on_empty_sqlite_lists_pending_and_exits_4(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    db.touch()
    proc = run_cli(tmp_path, "migrate", "--dry-run", "--json", "--url", f"sqlite:///{db}")
    assert proc.returncode == 4, proc.stderr
    known = [m.version for m in load_migrations("sqlite")]
    assert [m["version"] for m in json.loads(proc.stdout)["pending"]] == known
    with closing(sqlite3.connect(db)) as conn:
        tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    assert tables == [], "a dry run must not write"


def test_migrate_then_dry_run_on_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    applied = run_cli(tmp_path, "migrate", "--url", url)
    assert applied.returncode == 0, applied.stderr
    dry = run_cli(tmp_path, "migrate", "--dry-run", "--json", "--url", url)
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout) == {"pending": []}


def test_migrate_show_sql_offline_prints_every_migration() -> None:
    result = invoke("migrate", "--show-sql", "--url", DEAD_PG)
    assert result.exit_code == 0
    assert "-- migration 0001_initial" in result.stdout and "CREATE TABLE" in result.stdout
    assert "database unreachable" in result.stderr
    doc = json.loads(invoke("migrate", "--show-sql", "--json", "--url", DEAD_PG).stdout)
    assert doc["offline"] is True
    assert doc["pending"][0]["version"] == 1 and "conveyor_jobs" in doc["pending"][0]["sql"]


# -- enqueue and jobs -----------------------------------------------------------------------


def test_retry_cancel_round_trip(tmp_path: Path, sqlite_url: str) -> None:
    job = run_json(tmp_path, "enqueue", "send_report", "--args", '["q3"]',
                   "--kwargs", '{"to": "a@b.c"}', "--queue", "reports", "--priority", "3",
                   "--delay", "3600", "--max-attempts", "4", "--url", sqlite_url)
    assert (job["task"], job["queue"], job["state"]) == ("send_report", "reports", "scheduled")
    assert (job["args"], job["kwargs"]) == (["q3"], {"to": "a@b.c"})
    assert (job["priority"], job["max_attempts"]) == (3, 4)
    job_id = str(job["id"])

    cancelled = run_json(tmp_path, "jobs", "cancel", job_id, "--url", sqlite_url)
    assert cancelled["state"] == "cancelled"
    again = run_cli(tmp_path, "jobs", "cancel", job_id, "--url", sqlite_url)
    assert again.returncode == 1
    assert_one_line_error(again)

    retried = run_json(tmp_path, "jobs", "retry", job_id, "--url", sqlite_url)
    assert retried["state"] == "available"
    shown = run_json(tmp_path, "jobs", "show", job_id, "--url", sqlite_url)
    assert shown["state"] == "available"
    listed = run_json(tmp_path, "jobs", "list", "--queue", "reports", "--url", sqlite_url)
    assert [j["id"] for j in listed] == [job["id"]]

    table = run_cli(tmp_path, "jobs", "list", "--url", sqlite_url)
    assert table.returncode == 0
    assert "send_report" in table.stdout and "available" in table.stdout

    missing = run_cli(tmp_path, "jobs", "show", "424242", "--url", sqlite_url)
    assert missing.returncode == 1
    assert_one_line_error(missing)
    assert "424242" in missing.stderr


def test_enqueue_with_app_checks_the_task(sqlite_url: str) -> None:
    unknown = invoke("enqueue", "nope", "--app", APP, "--url", sqlite_url)
    assert unknown.exit_code == 2
    assert "add" in unknown.stderr and "shout" in unknown.stderr
    bad_args = invoke("enqueue", "add", "--args", "[1]", "--app", APP, "--url", sqlite_url)
    assert bad_args.exit_code == 2
    assert "add" in bad_args.stderr
    ok = invoke("enqueue", "shout", "--kwargs", '{"text": "hi"}', "--json",
                "--app", APP, "--url", sqlite_url)
    assert ok.exit_code == 0, ok.stderr
    assert json.loads(ok.stdout)["queue"] == "sync"  # the task's own default queue


def test_url_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--url, then the app's own URL, then $CONVEYOR_URL, then ./conveyor.db."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the CLI adds the cwd to it
    env_url = f"sqlite:///{tmp_path / 'env.db'}"
    flag_url = f"sqlite:///{tmp_path / 'flag.db'}"
    assert invoke("enqueue", "a", "--json").exit_code == 0
    assert invoke("enqueue", "b", "--json", CONVEYOR_URL=env_url).exit_code == 0
    assert invoke("enqueue", "c", "--json", "--url", flag_url,
                  CONVEYOR_URL=env_url).exit_code == 0
    assert invoke("enqueue", "add", "--args", "[1, 2]", "--app", APP,
                  "--url", flag_url).exit_code == 0

    def tasks(url: str) -> list[str]:
        result = invoke("jobs", "list", "--json", "--url", url)
        return sorted(job["task"] for job in json.loads(result.stdout))

    assert tasks("sqlite:///conveyor.db") == ["a"]
    assert tasks(env_url) == ["b"]
    assert tasks(flag_url) == ["add", "c"]


def test_app_module_from_the_current_directory(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cwd_app_for_cli_test.py").write_text(
        "from conveyor import Conveyor\n"
        f"app = Conveyor('sqlite:///{tmp_path / 'own.db'}')\n"
        "@app.task\n"
        "def ping() -> str:\n"
        "    return 'pong'\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "cwd_app_for_cli_test", raising=False)
    result = invoke("enqueue", "ping", "--json", CONVEYOR_APP="cwd_app_for_cli_test:app")
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "own.db").exists()  # the app's own URL, not ./conveyor.db
    monkeypatch.delitem(sys.modules, "cwd_app_for_cli_test", raising=False)


def test_jobs_show_renders_errors_as_plain_text(sqlite_url: str) -> None:
    app = Conveyor(sqlite_url)

    @app.task(max_attempts=1)
    async def explode() -> None:
        raise RuntimeError("boom [red]not markup[/red]")

    async def burst() -> None:
        try:
            await app.run_worker(config=WorkerConfig(burst=True))
        finally:
            await app.close_async()

    try:
        job = explode.enqueue()
        asyncio.run(burst())
    finally:
        app.close()
    result = invoke("jobs", "show", str(job.id), "--url", sqlite_url)
    assert result.exit_code == 0
    assert "discarded" in result.stdout and "errors (1)" in result.stdout
    assert "boom [red]not markup[/red]" in result.stdout
    assert "Traceback" in result.stdout
    listed = invoke("jobs", "list", "--url", sqlite_url)
    assert "[red]not markup[/red]" in listed.stdout


# -- worker -----------------------------------------------------------------------------------


def test_parse_queues() -> None:
    assert parse_queues([], 7) == {"default": 7}
    assert parse_queues(["default,mail:5"], 10) == {"default": 10, "mail": 5}
    assert parse_queues(["a", "b:2, c"], 3) == {"a": 3, "b": 2, "c": 3}
    for bad in ("mail:0", "mail:x", ":3"):
        with pytest.raises(click.BadParameter):
            parse_queues([bad], 1)


def _record(**extra: Any) -> logging.LogRecord:
    record = logging.LogRecord("conveyor.job", logging.WARNING, __file__, 1,
                               "job %d failed", (7,), None)
    record.__dict__.update(extra)
    return record


def test_log_formats_carry_job_fields() -> None:
    doc = json.loads(JsonFormatter().format(_record(job_id=7, task="t", queue="q", attempt=2)))
    assert {k: v for k, v in doc.items() if k != "ts"} == {
        "level": "WARNING", "logger": "conveyor.job", "message": "job 7 failed",
        "job_id": 7, "task": "t", "queue": "q", "attempt": 2}
    assert set(json.loads(JsonFormatter().format(_record()))) == {
        "ts", "level", "logger", "message"}
    assert "[job_id=7 task=t" in TextFormatter().format(_record(job_id=7, task="t"))


def _enqueue_adds(url: str, n: int) -> list[int]:
    with closing(Conveyor(url)) as producer:
        add = producer.task(name="add")(_placeholder)
        return [job.id for job in producer.enqueue_many([add.job(i, i) for i in range(n)])]


def _results(url: str, ids: list[int]) -> dict[int, tuple[JobState, Any]]:
    with closing(Conveyor(url)) as reader:
        jobs = [reader.get_job(i) for i in ids]
    return {j.id: (j.state, j.result) for j in jobs if j is not None}


def test_worker_burst_runs_every_job(db_url: str) -> None:
    ids = _enqueue_adds(db_url, 20)
    proc = run_cli(ROOT, "worker", APP, "--burst", "-c", "5", "--lease-ttl", "5",
                   "--heartbeat-interval", "0.5", "--log-format", "json",
                   CONVEYOR_URL=db_url)
    assert proc.returncode == 0, proc.stderr
    assert all(json.loads(line)["logger"].startswith("conveyor")
               for line in proc.stderr.splitlines() if line.strip())
    results = _results(db_url, ids)
    assert results == {job_id: (JobState.COMPLETED, 2 * i) for i, job_id in enumerate(ids)}


def test_worker_supervisor_burst(sqlite_url: str) -> None:
    ids = _enqueue_adds(sqlite_url, 30)
    proc = run_cli(ROOT, "worker", APP, "--burst", "--processes", "2", "-q", "default:4",
                   "--url", sqlite_url)
    assert proc.returncode == 0, proc.stderr
    assert {state for state, _ in _results(sqlite_url, ids).values()} == {JobState.COMPLETED}


def _live_nodes(path: str) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("SELECT count(*) FROM conveyor_nodes").fetchone()[0])


def test_worker_supervisor_forwards_sigterm(sqlite_url: str) -> None:
    invoke("migrate", "--url", sqlite_url)
    path = sqlite_url.removeprefix("sqlite:///")
    proc = subprocess.Popen(
        [sys.executable, "-m", "conveyor", "worker", APP, "--processes", "2", "--url",
         sqlite_url, "--log-level", "warning"],
        cwd=ROOT, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while _live_nodes(path) < 2:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "children did not start"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    assert _live_nodes(path) == 0  # both children shut down gracefully


# -- demo ---------------------------------------------------------------------------------------


def test_demo_end_to_end(tmp_path: Path) -> None:
    started = time.monotonic()
    proc = run_cli(tmp_path, "demo", "--jobs", "300")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert time.monotonic() - started < 60
    assert "summary" in proc.stdout
    assert "throughput" in proc.stdout and "attempts used" in proc.stdout
    demo_url = "sqlite:///.conveyor-demo/conveyor-demo.db"
    assert f"inspect with: conveyor jobs list --state discarded --url {demo_url}" in proc.stdout
    assert (tmp_path / ".conveyor-demo" / "conveyor-demo.db").exists()
    assert not (tmp_path / "conveyor.db").exists()

    jobs = run_json(tmp_path, "jobs", "list", "--limit", "1000", "--url", demo_url)
    assert len(jobs) == 300
    assert {job["state"] for job in jobs} <= {"completed", "discarded"}
    discarded = [job for job in jobs if job["state"] == "discarded"]
    assert [(job["task"], job["attempt"]) for job in discarded] == [("flaky_webhook", 3)]
    assert "ConnectionError" in discarded[0]["errors"][-1]["error"]
    assert discarded[0]["errors"][-1]["traceback"]

    only = run_json(tmp_path, "jobs", "list", "--state", "discarded", "--url", demo_url)
    assert [job["id"] for job in only] == [discarded[0]["id"]]


def test_demo_refuses_a_foreign_file_with_exit_1(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.db").write_text("someone else's file")
    result = invoke("demo", "--jobs", "10", "--url", "sqlite:///notes.db")
    assert result.exit_code == 1
    assert "refusing" in result.stderr and "not a Conveyor database" in result.stderr
    assert (tmp_path / "notes.db").read_text() == "someone else's file"
