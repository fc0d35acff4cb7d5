"""The worked example of docs/testing.md, run as a user would: its two files written
out as a project, and pytest run on them with the plugin (SQLite, then PostgreSQL)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
BLOCK = re.compile(r"```python\n# (\S+\.py)\n(.*?)```", re.DOTALL)
INI = re.compile(r"```ini\n# pytest\.ini[^\n]*\n(.*?)```", re.DOTALL)
TREE = re.compile(r"```text\n(pytest\.ini\n.*?)```", re.DOTALL)


def write_example(root: Path) -> None:
    """The documented layout and nothing else: the doc's ``pytest.ini`` and its two
    files, so that a layout that does not work as written fails here (it lacked
    ``pythonpath = .``: ``myproj`` could not be imported)."""
    doc = DOC.read_text()
    files = dict(BLOCK.findall(doc))
    assert set(files) == {"myproj/tasks.py", "tests/test_tasks.py"}, set(files)
    inis = INI.findall(doc)
    assert len(inis) == 1, inis
    files["pytest.ini"] = inis[0]
    for name, body in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    layout = TREE.search(doc)
    assert layout is not None and set(layout.group(1).split()) == set(files), files


def run(root: Path, url: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    if url is not None:
        env["CONVEYOR_TEST_DATABASE_URL"] = url
    # -P: as the ``pytest`` command does, the working directory is not put on sys.path
    # (``python -m`` would, and hide a layout that cannot import its own package).
    return subprocess.run([sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=180)


@pytest.mark.sqlite
def test_the_documented_example_passes_on_sqlite(tmp_path: Path) -> None:
    write_example(tmp_path)
    done = run(tmp_path, None)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 passed" in done.stdout


def test_the_documented_example_passes_on_postgres(tmp_path: Path, postgres_admin_url: str) -> None:
    write_example(tmp_path)
    done = run(tmp_path, postgres_admin_url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 passed" in done.stdout
