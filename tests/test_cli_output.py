"""CLI output piped or in a log (issue 28 defect 11): nothing is cut to 80 columns, and
``jobs list`` says how many jobs matched when ``--limit`` cut the list. The CLI runs as
a subprocess with stdout piped and no ``COLUMNS``, as in a shell pipe or a cron log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conveyor import Conveyor

from .test_cli import cli_env

LONG_QUEUE = "notifications-" + "x" * 60


def run_piped(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = cli_env()
    env.pop("COLUMNS")  # what a pipe or a log has: no terminal, no width
    env.pop("LINES", None)
    return subprocess.run([sys.executable, "-m", "conveyor", *args], cwd=cwd, env=env,
                          capture_output=True, text=True,
                          timeout=90, check=False)


def test_queues_list_is_not_cut_off_a_terminal(app: Conveyor, db_url: str,
                                               tmp_path: Path) -> None:
    """It read "que… pau… co…" in a log."""
    app.set_queue_concurrency(LONG_QUEUE, 3)
    app.set_queue_backoff(LONG_QUEUE, "exp:5:3600")
    app.pause_queue(LONG_QUEUE)
    proc = run_piped(tmp_path, "queues", "list", "--url", db_url)
    assert proc.returncode == 0, proc.stderr
    assert "…" not in proc.stdout, proc.stdout
    header = next(line.split() for line in proc.stdout.splitlines() if "queue" in line.split())
    for column in ("paused", "concurrency", "rate", "backoff", "retention", "available",
                   "discarded"):
        assert column in header, header
    row = next(line for line in proc.stdout.splitlines() if LONG_QUEUE in line)
    assert "paused" in row and "3 (" in row, row


def test_jobs_list_is_not_cut_off_a_terminal(app: Conveyor, db_url: str,
                                             tmp_path: Path) -> None:
    @app.task(queue=LONG_QUEUE)
    def deliver(address: str, body: str) -> None:
        pass

    body = "b" * 300
    job = deliver.enqueue("someone@example.com", body)
    proc = run_piped(tmp_path, "jobs", "list", "--url", db_url)
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.strip().startswith(str(job.id)))
    assert LONG_QUEUE in row and body in row and "…" not in row, row


@pytest.mark.parametrize("limit, expected", [
    (None, "50 of 1,001 job(s), newest first (--limit)"),
    ("1001", "1,001 job(s), newest first"),
    ("2000", "1,001 job(s), newest first"),
])
def test_jobs_list_says_how_many_matched(app: Conveyor, db_url: str, tmp_path: Path,
                                         limit: str | None, expected: str) -> None:
    """It ended "50 job(s)" when 1,001 matched."""
    @app.task
    def noop(n: int) -> None:
        pass

    app.enqueue_many([noop.job(i) for i in range(1_001)])
    noop.options(queue="other").enqueue(0)  # not matched by --queue default
    args = ["jobs", "list", "--queue", "default", "--url", db_url]
    proc = run_piped(tmp_path, *args, *(["--limit", limit] if limit else []))
    assert proc.returncode == 0, proc.stderr
    assert _summary(proc.stdout) == expected, proc.stdout[-300:]
    # a page cut by --limit says how to list the older jobs; the whole list does not
    assert ("older jobs: --before-id" in proc.stdout) == (limit is None), proc.stdout[-300:]


def _summary(out: str) -> str:
    """The "N of M job(s)" line: the last one, or the one before "older jobs: ..."."""
    lines = [line.strip() for line in out.rstrip().splitlines()]
    return lines[-2] if lines[-1].startswith("older jobs: --before-id") else lines[-1]


def test_the_total_follows_every_filter(app: Conveyor, db_url: str, tmp_path: Path) -> None:
    @app.task
    def noop(n: int) -> None:
        pass

    @app.task
    def other(n: int) -> None:
        pass

    app.enqueue_many([noop.job(i) for i in range(7)] + [other.job(i) for i in range(5)])
    proc = run_piped(tmp_path, "jobs", "list", "--task", noop.name, "--state", "available",
                     "--limit", "3", "--url", db_url)
    assert proc.returncode == 0, proc.stderr
    assert _summary(proc.stdout) == "3 of 7 job(s), newest first (--limit)", proc.stdout
