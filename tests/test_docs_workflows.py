"""docs/workflows.md's "one script", put together as the doc says and run as it says
(issue 28 defect 13): ``python example.py`` enqueues, ``conveyor worker --app
example:app --burst`` runs everything, and the worker importing the module enqueues
nothing more (the script had no ``__main__`` guard: every import enqueued again)."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "workflows.md"
SRC = Path(__file__).resolve().parents[1] / "src"
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
GUARD = 'if __name__ == "__main__":'
PLACEHOLDER = re.compile(r"^    \.\.\.  # the blocks of the sections below.*$", re.MULTILINE)
COMMANDS = re.compile(r"```console\n(.*?)```", re.DOTALL)


def assemble() -> str:
    """The first block, with every later block indented under its ``__main__`` guard."""
    first, *later = BLOCK.findall(DOC.read_text())
    assert GUARD in first and PLACEHOLDER.search(first), first[-300:]
    body = "\n".join("\n".join(f"    {line}" if line.strip() else "" for line in block.splitlines())
                     for block in later)
    return PLACEHOLDER.sub(lambda _: body, first)


def run(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def job_states(db: Path) -> dict[str, int]:
    """Every job's state, live or in history (a completion may move there at its ack)."""
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT state, count(*) FROM conveyor_jobs_all GROUP BY state"))


@pytest.mark.sqlite
def test_the_one_script_enqueues_once_and_a_worker_runs_it(tmp_path: Path) -> None:
    commands = [line.split() for block in COMMANDS.findall(DOC.read_text())[:1]
                for line in block.splitlines() if line.strip()]
    assert commands == [["python", "example.py"],
                        ["conveyor", "worker", "--app", "example:app", "--burst"]], commands
    (tmp_path / "example.py").write_text(assemble())
    migrate = run(tmp_path, "-m", "conveyor", "migrate", "--url", "sqlite:///jobs.db")
    assert migrate.returncode == 0, migrate.stderr

    enqueued = run(tmp_path, "example.py")
    assert enqueued.returncode == 0, enqueued.stderr
    before = job_states(tmp_path / "jobs.db")
    total = sum(before.values())
    assert total > 20, before

    worker = run(tmp_path, "-m", *commands[1])
    assert worker.returncode == 0, worker.stderr[-2000:]
    after = job_states(tmp_path / "jobs.db")
    assert sum(after.values()) == total, (before, after)  # importing it enqueued nothing
    assert set(after) <= {"completed", "discarded", "cancelled"}, after
    assert "notify: all resized" in worker.stdout + worker.stderr
