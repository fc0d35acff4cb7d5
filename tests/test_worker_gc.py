"""The `conveyor worker` process tunes its garbage collector (cli/worker.py tune_gc):
the app loaded before the first job is frozen out of collections and young collections
run every GC_YOUNG_THRESHOLD allocations. Only in a process the CLI owns, and not with
$CONVEYOR_GC_DEFAULTS=1. A real worker process runs a job that reports what it saw."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conveyor import Conveyor
from conveyor.cli import worker as worker_cli

APP = '''
import gc
from conveyor import Conveyor

app = Conveyor()

@app.task(name="collector")
def collector() -> list[int]:
    return [gc.get_threshold()[0], gc.get_freeze_count()]
'''


def _collector() -> list[int]:
    return []  # the enqueuing side's stand-in: the worker runs gcapp's


def _run_worker(tmp_path: Path, env_extra: dict[str, str]) -> list[int]:
    (tmp_path / "gcapp.py").write_text(APP)
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]),
           "CONVEYOR_URL": url, **env_extra}
    if "CONVEYOR_GC_DEFAULTS" not in env_extra:
        env.pop("CONVEYOR_GC_DEFAULTS", None)
    app = Conveyor(url)
    try:
        app.migrate()
        job = app.task(name="collector")(_collector).enqueue()
    finally:
        app.close()
    done = subprocess.run([sys.executable, "-m", "conveyor", "worker", "gcapp:app", "--burst"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    app = Conveyor(url)
    try:
        got = app.get_job(job.id)
    finally:
        app.close()
    assert got is not None and got.state.value == "completed", got
    return list(got.result)


def test_a_worker_process_freezes_its_app_and_collects_young_objects_less_often(
        tmp_path: Path) -> None:
    threshold, frozen = _run_worker(tmp_path, {})
    assert threshold == worker_cli.GC_YOUNG_THRESHOLD
    assert frozen > 1000  # the app and its imports


def test_conveyor_gc_defaults_leaves_cpythons_settings(tmp_path: Path) -> None:
    threshold, frozen = _run_worker(tmp_path, {"CONVEYOR_GC_DEFAULTS": "1"})
    assert threshold == gc.get_threshold()[0] != worker_cli.GC_YOUNG_THRESHOLD
    assert frozen == 0


def test_a_process_that_is_not_the_clis_own_keeps_its_settings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    before = gc.get_threshold()
    monkeypatch.delenv("CONVEYOR_GC_DEFAULTS", raising=False)
    worker_cli.tune_gc()  # as when a test or a host app invokes the command in-process
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
