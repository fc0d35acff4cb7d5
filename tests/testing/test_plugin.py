"""The pytest plugin as a user gets it: installed (entry point), pointed at the user's
own app by an ini setting, on a SQLite file per test, or on a PostgreSQL database per
test when a server is configured. Run in a pytest of its own (a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.conftest import WaitFor

PROJECT_APP = '''
from conveyor import Conveyor
app = Conveyor("sqlite:///must-not-be-used.db")

@app.task(queue="mail")
def send_welcome(to: str) -> str:
    return "sent " + to

def signup(email: str) -> None:
    send_welcome.enqueue(email)
'''

PROJECT_TESTS = '''
from conveyor.testing import assert_enqueued, refute_enqueued
import myproj

def test_signup_enqueues(conveyor_app):
    assert conveyor_app is myproj.app and conveyor_app.url != "sqlite:///must-not-be-used.db"
    myproj.signup("ada@example.com")
    assert_enqueued(myproj.send_welcome, args=["ada@example.com"], queue="mail", count=1)
    assert [o.result for o in conveyor_app.drain().completed] == ["sent ada@example.com"]

def test_each_test_starts_empty(conveyor_app, conveyor_clock):
    refute_enqueued(myproj.send_welcome)
    with conveyor_app.inline():
        job = myproj.send_welcome.options(delay=60).enqueue("bob@example.com")
    conveyor_clock.advance(minutes=2)
    assert len(conveyor_app.drain()) == 1
    print("URL", conveyor_app.url)
'''


def run_project(tmp_path: Path, env_url: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "myproj.py").write_text(PROJECT_APP)
    (tmp_path / "test_myproj.py").write_text(PROJECT_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nconveyor_app = myproj:app\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    if env_url is not None:
        env["CONVEYOR_TEST_DATABASE_URL"] = env_url
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.sqlite
def test_plugin_isolates_the_users_app_on_sqlite(tmp_path: Path) -> None:
    done = run_project(tmp_path, None)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
    assert not (tmp_path / "must-not-be-used.db").exists()


def test_plugin_gives_each_test_a_postgres_database(tmp_path: Path, postgres_admin_url: str,
                                                    wait_for: WaitFor) -> None:
    def databases() -> set[str]:
        with psycopg.connect(postgres_admin_url) as conn:
            rows = conn.execute("SELECT datname FROM pg_database"
                                " WHERE datname LIKE 'conveyor_tpl_%' OR datname LIKE 'conveyor_tdb_%'")
            return {r[0] for r in rows}

    before = databases()
    done = run_project(tmp_path, postgres_admin_url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout and "URL postgresql://" in done.stdout
    used = [line.split("/")[-1] for line in done.stdout.splitlines() if "URL postgresql://" in line]
    assert len(used) == 1 and used[0].startswith("conveyor_tdb_")
    # The template and every test's copy are dropped: the test's own at once; any other
    # new one must go too (another pytest on this server may hold some for a while).
    assert used[0] not in databases()
    wait_for(lambda: not (databases() - before), timeout=120, interval=0.5,
             message="the plugin's databases to be dropped")


def test_a_bad_app_setting_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text("def test_x(conveyor_app):\n    pass\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nconveyor_app = nosuchmodule:app\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "conveyor_app = 'nosuchmodule:app' cannot be loaded" in done.stdout + done.stderr


def test_rebind_points_an_app_elsewhere_and_back(db_url: str, tmp_path: Path) -> None:
    """What the plugin does to a user's app: its tasks follow it to the test database,
    sync and async connections opened there are closed, and it comes back."""
    import asyncio

    from conveyor import Conveyor
    from conveyor.testing import VirtualClock

    home = f"sqlite:///{tmp_path / 'home.db'}"
    app = Conveyor(home)
    try:
        @app.task
        def ping() -> None: ...

        ping.enqueue()
        clock = VirtualClock()
        with app.rebind(db_url, clock=clock):
            assert app.url == db_url and app.clock is clock
            ping.enqueue()
            ping.enqueue()

            async def more() -> None:
                await ping.enqueue_async()

            asyncio.run(more())  # a loop that ends inside the block
            assert app.count_jobs()["available"] == 3
            clock.advance(hours=1)
        assert app.url == home and app.clock is None
        assert app.count_jobs()["available"] == 1  # the home database, untouched
        clock.advance(hours=1)  # detached: writes to nobody
        with app.rebind(db_url):
            assert app.count_jobs()["available"] == 3  # the other database kept its jobs
    finally:
        app.close()
