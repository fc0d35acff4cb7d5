"""Issue 11: `conveyor demo` never touches data it did not create.

A user's ./conveyor.db and a user's PostgreSQL database in $CONVEYOR_URL stay exactly
as they were; `--url` to a database holding other jobs is refused (nothing written,
nothing run); `--url` to an empty database runs, and a re-run cleans only its own jobs.
"""

from __future__ import annotations

import hashlib
from contextlib import closing
from pathlib import Path

import pytest

from conveyor import Conveyor, JobState

from .test_cli import run_cli

DEMO_DB = Path(".conveyor-demo") / "conveyor-demo.db"


def user_jobs(url: str, n: int = 5) -> list[int]:
    """The Quickstart's jobs: mail to send, never run yet."""
    with closing(Conveyor(url)) as app:
        send = app.task(name="send_email", queue="mail")(lambda to, subject: None)
        return [send.enqueue(f"u{i}@example.com", subject="hi").id for i in range(n)]


def states(url: str, ids: list[int]) -> dict[int, JobState]:
    with closing(Conveyor(url)) as app:
        found = {i: app.get_job(i) for i in ids}
        return {i: job.state for i, job in found.items() if job is not None}


def all_jobs(url: str) -> int:
    with closing(Conveyor(url)) as app:
        return sum(app.count_jobs().values())


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_demo_leaves_the_users_conveyor_db_untouched(tmp_path: Path) -> None:
    own = tmp_path / "conveyor.db"
    ids = user_jobs(f"sqlite:///{own}")
    before = {p.name: digest(p) for p in tmp_path.iterdir() if p.is_file()}
    proc = run_cli(tmp_path, "demo", "--jobs", "20")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert {p.name: digest(p) for p in tmp_path.iterdir() if p.is_file()} == before
    assert states(f"sqlite:///{own}", ids) == dict.fromkeys(ids, JobState.AVAILABLE)
    assert (tmp_path / DEMO_DB).exists()
    assert "removed" not in proc.stdout


def test_demo_ignores_conveyor_url(tmp_path: Path, postgres_db_url: str) -> None:
    from .conftest import truncate_conveyor_tables

    truncate_conveyor_tables(postgres_db_url)
    ids = user_jobs(postgres_db_url)
    proc = run_cli(tmp_path, "demo", "--jobs", "20", CONVEYOR_URL=postgres_db_url)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert all_jobs(postgres_db_url) == len(ids)  # not one demo job written there
    assert states(postgres_db_url, ids) == dict.fromkeys(ids, JobState.AVAILABLE)
    assert (tmp_path / DEMO_DB).exists()


@pytest.mark.parametrize("where", ["other queue", "demo queue"])
def test_demo_refuses_a_url_holding_other_jobs(tmp_path: Path, db_url: str,
                                               where: str) -> None:
    if where == "other queue":
        ids = user_jobs(db_url)
    else:  # a user's task in a queue named like the demo's
        with closing(Conveyor(db_url)) as app:
            mine = app.task(name="mine", queue="demo-mail")(lambda: None)
            ids = [mine.enqueue().id]
    proc = run_cli(tmp_path, "demo", "--jobs", "20", "--url", db_url)
    assert proc.returncode == 1, proc.stderr + proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert (len(lines) == 1 and "refusing" in lines[0] and "not the demo's" in lines[0]) or (
        "other tasks" in lines[0]), proc.stderr
    assert all_jobs(db_url) == len(ids)
    assert states(db_url, ids) == dict.fromkeys(ids, JobState.AVAILABLE)


def test_demo_runs_on_an_empty_url_and_cleans_only_its_own_jobs(tmp_path: Path,
                                                               db_url: str) -> None:
    for _ in range(2):
        proc = run_cli(tmp_path, "demo", "--jobs", "20", "--url", db_url)
        assert proc.returncode == 0, proc.stderr + proc.stdout
        assert all_jobs(db_url) == 20
    assert "removed 20 job(s) of a previous demo run" in proc.stdout
    with closing(Conveyor(db_url)) as app:
        assert {q.name for q in app.list_queues()} <= {
            "demo-mail", "demo-images", "demo-inventory", "demo-billing", "demo-webhooks"}
    assert not (tmp_path / ".conveyor-demo").exists()


def test_demo_says_how_to_reach_conveyor_and_use_it_in_a_project(tmp_path: Path) -> None:
    proc = run_cli(tmp_path, "demo", "--jobs", "10", PATH="/usr/bin:/bin")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    out = " ".join(proc.stdout.split())
    assert "not on your PATH" in out and "/bin/activate" in out
    assert "pip install -e" in out
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert "source .venv/bin/activate" in readme and "pip install -e" in readme
