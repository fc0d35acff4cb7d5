"""The runnable examples under examples/ (testing, sqlalchemy, observability), run as a
user runs them, on SQLite and PostgreSQL. (examples/django and examples/fastapi are
tested in tests/contrib/.)"""

from __future__ import annotations

import importlib.util
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import cast

import pytest

from conveyor import Conveyor, JobState, WorkerConfig

from . import _pg
from .conftest import wait_for
from .contrib import test_sentry
from .contrib.test_sentry import Capture
from .contrib.test_starlette import served  # uvicorn serving an ASGI app on a thread

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """A Python subprocess with this venv, none of the outer CONVEYOR_* variables, and
    no bytecode written into the examples."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CONVEYOR_", "SENTRY_"))}
    clean |= {"PYTHONDONTWRITEBYTECODE": "1", **env}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=clean, capture_output=True,
                          text=True, timeout=180)


@pytest.fixture(params=[pytest.param("sqlite", marks=pytest.mark.sqlite),
                        pytest.param("postgres", marks=pytest.mark.postgres)])
def fresh_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database, not migrated (the examples do it): a new SQLite file, or a
    PostgreSQL database created for the test and dropped after it."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'example.db'}"
        return
    admin = cast(str, request.getfixturevalue("postgres_admin_url"))
    with _pg.scratch_database(admin, "conveyor_example") as url:
        yield url


# -- all three: what users copy type-checks ------------------------------------------------------


def test_the_examples_pass_mypy_strict(tmp_path: Path) -> None:
    """examples/ is outside mypy's files in pyproject.toml; checked here (the testing
    example from its own folder, where its ``shop`` package is found)."""
    runs = [(EXAMPLES, ["sqlalchemy/shop.py", "observability/app.py"], 2),
            (EXAMPLES / "testing", ["shop", "tests"], 4)]
    for cwd, paths, count in runs:
        done = run(["-m", "mypy", "--strict", "--cache-dir", str(tmp_path / cwd.name), *paths], cwd)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"Success: no issues found in {count} source files" in done.stdout


# -- examples/testing: a project tested with the pytest plugin ----------------------------------


def run_testing_example(**env: str) -> str:
    done = run(["-m", "pytest", "-q", "-p", "no:cacheprovider"], EXAMPLES / "testing", **env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.sqlite
def test_the_testing_example_passes_on_sqlite() -> None:
    assert re.search(r"^6 passed", run_testing_example(), re.MULTILINE)


def test_the_testing_example_passes_on_postgres(postgres_admin_url: str) -> None:
    out = run_testing_example(CONVEYOR_TEST_DATABASE_URL=postgres_admin_url)
    assert re.search(r"^6 passed", out, re.MULTILINE)


# -- examples/sqlalchemy: the order and its job in one ORM transaction --------------------------


def test_the_sqlalchemy_example_commits_orders_with_their_jobs(fresh_database: str,
                                                               tmp_path: Path) -> None:
    done = run([str(EXAMPLES / "sqlalchemy" / "shop.py")], tmp_path, CONVEYOR_URL=fresh_database)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    sync_id, async_id = int(lines[0].split()[1]), int(lines[2].split()[2])
    assert lines[:8] == [
        f"order {sync_id} committed", "order rolled back: no order, no job",
        f"async order {async_id} committed", "async order rolled back: no order, no job",
        "jobs waiting: 2",
        f"order {sync_id}: book, shipped=True", f"order {async_id}: pen, shipped=True",
        "orders stored: 2"]
    assert [re.sub(r"^job \d+", "job", line) for line in lines[8:]] == [
        f"job: completed, shipped order {sync_id} (book)",
        f"job: completed, shipped order {async_id} (pen)"]

    # Read back independently: two orders, two jobs, both run by the burst worker.
    app = Conveyor(fresh_database)
    try:
        jobs = app.list_jobs()
        assert sorted(j.args[0] for j in jobs) == sorted([sync_id, async_id])
        assert {j.state for j in jobs} == {JobState.COMPLETED}
        assert app.count_jobs()["completed"] == 2 and sum(app.count_jobs().values()) == 2
    finally:
        app.close()


def test_the_sqlalchemy_example_on_a_missing_database_fails_clearly(
        postgres_admin_url: str, tmp_path: Path) -> None:
    missing = _pg.with_database(postgres_admin_url, f"conveyor_missing_{secrets.token_hex(4)}")
    done = run([str(EXAMPLES / "sqlalchemy" / "shop.py")], tmp_path, CONVEYOR_URL=missing)
    assert done.returncode == 1 and done.stdout == ""
    assert "DatabaseUnavailableError: cannot use PostgreSQL at" in done.stderr
    assert "does not exist" in done.stderr


# -- examples/observability: Sentry events and the host's /metrics -------------------------------

#: The SDK on a capturing transport (no network), as in the Sentry tests.
sentry = test_sentry.sentry


def load_observability(db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ModuleType:
    """A fresh copy of examples/observability/app.py on ``db_url`` (its own registry)."""
    monkeypatch.setenv("CONVEYOR_URL", db_url)
    monkeypatch.delenv("SENTRY_DSN", raising=False)  # the test's capturing SDK stays
    monkeypatch.chdir(tmp_path)
    path = EXAMPLES / "observability" / "app.py"
    spec = importlib.util.spec_from_file_location(f"example_observability_{id(tmp_path)}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample in a text exposition, or None."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        key, _, value = line.rpartition(" ")
        if key == (f"{name}{{{wanted}}}" if labels else name):
            return float(value)
    return None


def test_the_observability_example_reports_failures_and_serves_metrics(
        db_url: str, sentry: Capture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    example = load_observability(db_url, monkeypatch, tmp_path)
    config = WorkerConfig(heartbeat_interval=0.2, stage_interval=0.05, metrics_interval=0.2,
                          shutdown_timeout=10.0)
    with served(example.create_api(worker=config)) as client:
        broken = client.post("/feeds", json={"url": "ftp://feeds.example/broken"})
        good = client.post("/feeds", json={"url": "https://feeds.example/ok"})
        assert (broken.status_code, good.status_code) == (202, 202)
        assert client.post("/feeds", json={"url": 3}).status_code == 422  # nothing stored
        assert client.post("/feeds", content=b"{not json").status_code == 422
        wait_for(lambda: [s for s in example.queue.list_schedules()  # declared by the worker
                          if s.row.name == "refresh_exchange_rates" and s.row.cron == "*/15 * * * *"],
                 message="the periodic schedule declared")
        example.queue.trigger_schedule("refresh_exchange_rates")  # its job, now

        def scraped() -> str:
            text = client.get("/metrics").text
            done = {(task, outcome): sample(text, "conveyor_jobs_finished_total", outcome=outcome,
                                            queue=queue, task=task)
                    for task, queue, outcome in [("import_feed", "imports", "discarded"),
                                                 ("import_feed", "imports", "completed"),
                                                 ("refresh_exchange_rates", "default", "completed")]}
            return text if all(v == 1.0 for v in done.values()) else ""

        text = wait_for(scraped, timeout=30, message="the three jobs counted in /metrics")

    assert sample(text, "shop_http_requests_total", path="/feeds") == 4.0  # the host's own
    queue = cast(Conveyor, example.queue)
    try:
        assert sum(queue.count_jobs().values()) == 3  # two feeds, one periodic: none for bad input
    finally:
        queue.close()
    assert sample(text, "conveyor_jobs_finished_total", outcome="retried", queue="imports",
                  task="import_feed") == 2.0
    assert sample(text, "conveyor_database_up") == 1.0
    assert text.count("# TYPE conveyor_jobs_finished_total counter") == 1

    [event] = sentry.events()  # one event: the final failure; retries and successes send none
    tags = event["tags"] if isinstance(event["tags"], dict) else dict(event["tags"])
    assert tags == {"conveyor.job_id": str(broken.json()["job_id"]), "conveyor.task": "import_feed",
                    "conveyor.queue": "imports", "conveyor.attempt": "3", "conveyor.final": "true"}
    [exc] = event["exception"]["values"]
    assert (exc["type"], exc["value"]) == ("FeedUnavailable", "cannot fetch ftp://feeds.example/broken")
    assert event["contexts"]["conveyor_job"]["args"] == ["ftp://feeds.example/broken"]
