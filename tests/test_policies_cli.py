"""The policy commands and flags of the CLI: ``conveyor queues backoff|retention``,
``conveyor worker --label/--all-queues`` with $CONVEYOR_QUEUES, $CONVEYOR_WORKER_LABELS
and $CONVEYOR_APP_VERSION, and ``conveyor status`` showing them. Real databases of both
backends (``db_url``), real worker processes for what workers do."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from .test_cli import DEAD_PG, ROOT, assert_one_line_error, cli_env, invoke, run_cli

APP = "tests.apps.policies_app:app"


def queues_json(url: str) -> dict[str, Any]:
    result = invoke("queues", "list", "--json", "--app", APP, "--url", url)
    assert result.exit_code == 0, result.output
    return {q["name"]: q for q in json.loads(result.stdout)}


def test_queues_backoff_and_retention_commands(db_url: str) -> None:
    def run(*args: str) -> Any:
        return invoke("queues", *args, "--app", APP, "--url", db_url)

    done = run("backoff", "emails", "exp:5:3600")
    assert done.exit_code == 0, done.output
    assert "queue emails: backoff exp:5:3600" in done.stdout
    done = run("retention", "emails", "--completed", "60")
    assert done.exit_code == 0, done.output
    emails = queues_json(db_url)["emails"]
    assert (emails["backoff"], emails["completed_retention"], emails["discarded_retention"]) == (
        "exp:5:3600", 60.0, None)
    table = invoke("queues", "list", "--app", APP, "--url", db_url).stdout
    assert "exp:5:3600" in table and "1 min / workers'" in table
    assert run("retention", "emails", "--discarded", "86400").exit_code == 0
    assert queues_json(db_url)["emails"]["completed_retention"] == 60.0  # left as it was
    assert run("backoff", "emails", "--reset").exit_code == 0
    assert run("retention", "emails", "--reset").exit_code == 0
    emails = queues_json(db_url)["emails"]
    assert (emails["backoff"], emails["completed_retention"], emails["discarded_retention"]) == (
        None, None, None)


@pytest.mark.parametrize(("args", "message"), [
    (["backoff", "emails", "soon"], "a queue backoff is seconds"),
    (["backoff", "emails", "exp:10:5"], "CAP >= BASE"),
    (["backoff", "emails"], "give SPEC or --reset"),
    (["backoff", "emails", "5", "--reset"], "give SPEC or --reset"),
    (["backoff", "emials", "5"], "did you mean emails"),
    (["retention", "emails"], "give --completed and/or --discarded"),
    (["retention", "emails", "--completed", "-1"], "-1"),
    (["retention", "emails", "--completed", "5", "--reset"], "not both"),
])
def test_bad_queue_policy_commands_exit_2_and_change_nothing(
        db_url: str, args: list[str], message: str) -> None:
    result = invoke("queues", *args, "--app", APP, "--url", db_url)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert all(q["backoff"] is None and q["completed_retention"] is None
               for q in queues_json(db_url).values())


def _served(proc: subprocess.CompletedProcess[str]) -> dict[str, int]:
    assert proc.returncode == 0, proc.stderr
    found = re.search(r"started on queues (\{.*?\})", proc.stderr)
    assert found, proc.stderr
    return dict(json.loads(found.group(1).replace("'", '"')))


@pytest.mark.parametrize(("args", "env", "served"), [
    ([], {"CONVEYOR_QUEUES": "emails=3,reports"}, {"emails": 3, "reports": 10}),
    ([], {"CONVEYOR_QUEUES": "*,emails:2"}, {"default": 10, "emails": 2, "reports": 10}),
    (["-q", "default"], {"CONVEYOR_QUEUES": "emails=3"}, {"default": 10}),
    (["--all-queues"], {"CONVEYOR_QUEUES": "emails=3"},
     {"default": 10, "emails": 10, "reports": 10}),
    (["-q", "*,reports:4", "-c", "2"], {}, {"default": 2, "emails": 2, "reports": 4}),
    ([], {}, {"default": 10, "emails": 10, "reports": 10}),
])
def test_worker_queues_from_flags_env_and_the_app(
        db_url: str, args: list[str], env: dict[str, str], served: dict[str, int]) -> None:
    proc = run_cli(ROOT, "worker", APP, "--burst", *args, "--url", db_url, **env)
    assert _served(proc) == served


@pytest.mark.parametrize(("args", "env", "message"), [
    ([], {"CONVEYOR_QUEUES": "emails=0"}, "CONVEYOR_QUEUES: concurrency of 'emails' must be"),
    ([], {"CONVEYOR_QUEUES": "=3"}, "CONVEYOR_QUEUES: empty queue name"),
    ([], {"CONVEYOR_QUEUES": "emails=x"}, "got 'x'"),
    ([], {"CONVEYOR_QUEUES": " , "}, "CONVEYOR_QUEUES: no queue named"),
    ([], {"CONVEYOR_QUEUES": "bad queue!"}, "queue name"),
    (["-q", "emails:0"], {}, "concurrency of 'emails' must be"),
    (["--all-queues", "-q", "emails"], {}, "not both"),
    (["--label", "region"], {}, "expected KEY=VALUE"),
    (["--label", "bad key=1"], {}, "label key 'bad key'"),
    ([], {"CONVEYOR_WORKER_LABELS": "tier"}, "CONVEYOR_WORKER_LABELS: expected KEY=VALUE"),
])
def test_malformed_worker_queues_and_labels_exit_2(
        db_url: str, args: list[str], env: dict[str, str], message: str) -> None:
    result = invoke("worker", APP, "--burst", *args, "--url", db_url, **env)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_worker_help_documents_queues_labels_and_version() -> None:
    def help_of(*command: str) -> str:
        return " ".join(invoke(*command, "--help").stdout.split())  # unwrapped

    text = help_of("worker")
    for needle in ("$CONVEYOR_QUEUES", "--all-queues", "'*'", "--label", "KEY=VALUE",
                   "$CONVEYOR_WORKER_LABELS", "$CONVEYOR_APP_VERSION"):
        assert needle in text, needle
    text = help_of("queues")
    assert "backoff" in text and "retention" in text
    text = help_of("queues", "backoff")
    assert "exp:BASE[:CAP]" in text and "task's own backoff wins" in text


def _status(url: str) -> dict[str, Any]:
    proc = run_cli(ROOT, "status", "--json", "--app", APP, "--url", url)
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


def test_status_shows_labels_and_version_of_supervised_workers(db_url: str) -> None:
    invoke("migrate", "--url", db_url)
    env = cli_env(CONVEYOR_APP_VERSION="v7.1", CONVEYOR_WORKER_LABELS="team=core,region=us")
    proc = subprocess.Popen(
        [sys.executable, "-m", "conveyor", "worker", APP, "--processes", "2", "--url", db_url,
         "--label", "region=eu", "--label", "tier=gold", "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while len([w for w in _status(db_url)["workers"] if w["alive"]]) < 2:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "workers did not start"
            time.sleep(0.1)
        workers = _status(db_url)["workers"]
        text = run_cli(ROOT, "status", "--app", APP, "--url", db_url).stdout
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    for worker in workers:  # --label wins over the environment's region
        assert worker["labels"] == {"region": "eu", "tier": "gold", "team": "core"}
        assert worker["version"] == "v7.1"
    assert "v7.1" in text and "region=eu,team=core,tier=gold" in text


@pytest.mark.parametrize("command", [
    ["queues", "backoff", "emails", "5", "--force"],
    ["queues", "retention", "emails", "--completed", "60", "--force"],
    ["worker", APP, "--burst", "--label", "region=eu"],
])
def test_a_dead_database_is_one_clear_line_exit_3(tmp_path: Any, command: list[str]) -> None:
    proc = run_cli(tmp_path, *command, "--url", DEAD_PG, CONVEYOR_QUEUES="emails=2")
    assert proc.returncode == 3, proc.stderr
    assert_one_line_error(proc)
