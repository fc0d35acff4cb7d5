"""``conveyor status`` and ``conveyor queues`` on a core install: without the web and
prometheus extras (prometheus-client, starlette, jinja2 made unimportable in a child
process by a meta-path finder), both import and run on SQLite. And the dashboard
(``/metrics`` included) runs without prometheus-client.

Before the operator reads moved to the app layer, ``cli/status.py`` imported the
dashboard's data module, which imported ``conveyor.contrib.prometheus``: every command
crashed at import on a core install.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conveyor import Conveyor

from .test_cli import cli_env

#: The extras' top-level packages the child cannot import.
BLOCKED = ("prometheus_client", "starlette", "jinja2")

CHILD = textwrap.dedent("""
    import json, sys

    BLOCKED = set(sys.argv[1].split(","))

    class Block:
        '''Any import of a blocked package fails, as if it were not installed.'''

        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"No module named {name!r} (blocked by the test)")
            return None

    sys.meta_path.insert(0, Block())
    for name in list(sys.modules):
        if name.split(".")[0] in BLOCKED:
            del sys.modules[name]

    import conveyor.cli.queues, conveyor.cli.status, conveyor.web
    from conveyor.cli import cli

    code = 0
    try:
        cli.main(sys.argv[2:], prog_name="conveyor", standalone_mode=False)
    except SystemExit as exc:
        code = exc.code or 0
    sys.stdout.flush()
    loaded = sorted(n for n in sys.modules if n.split(".")[0] in BLOCKED)
    print("\\nLOADED " + json.dumps(loaded))
    sys.exit(code)
""")


def run_blocked(*args: str) -> tuple[str, list[str]]:
    proc = subprocess.run([sys.executable, "-c", CHILD, ",".join(BLOCKED), *args],
                          env=cli_env(), capture_output=True, text=True, timeout=90,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    out, _, loaded = proc.stdout.rpartition("\nLOADED ")
    return out, json.loads(loaded)


@pytest.fixture
def seeded(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'lean.db'}"
    app = Conveyor(url)

    @app.task(queue="mail")
    def send(to: str) -> None: ...

    app.migrate()
    send.enqueue("ada@example.com")
    send.enqueue("grace@example.com")
    app.close()
    return url


def test_the_blocker_really_blocks() -> None:
    """The child cannot import the extras (else the tests below prove nothing)."""
    code = CHILD.split("import conveyor.cli.queues")[0] + "import starlette\n"
    proc = subprocess.run([sys.executable, "-c", code, ",".join(BLOCKED)], env=cli_env(),
                          capture_output=True, text=True, timeout=90, check=False)
    assert proc.returncode == 1 and "blocked by the test" in proc.stderr


def test_status_runs_without_the_web_and_prometheus_extras(seeded: str) -> None:
    out, loaded = run_blocked("status", "--url", seeded)
    assert loaded == []
    assert "Jobs" in out and "available 2" in out and "mail" in out
    doc, loaded = run_blocked("status", "--json", "--url", seeded)
    assert loaded == []
    assert json.loads(doc)["queues"][0]["counts"]["available"] == 2


def test_queues_and_check_run_without_the_extras(seeded: str) -> None:
    doc, loaded = run_blocked("queues", "list", "--json", "--url", seeded)
    assert loaded == [] and [q["name"] for q in json.loads(doc)] == ["mail"]
    doc, loaded = run_blocked("check", "--json", "--url", seeded)
    assert loaded == [] and json.loads(doc)["status"] == "ok"


def test_the_web_face_and_dashboard_help_import_without_the_extras() -> None:
    """``conveyor.web`` (its settings, environment names, ``create_app``) imports
    without starlette and jinja2; only calling ``create_app`` needs them."""
    out, loaded = run_blocked("dashboard", "--help")
    assert loaded == [] and "--poll" in out and "[default: 2.0" in out


DASHBOARD = textwrap.dedent("""
    import sys
    from starlette.testclient import TestClient

    from conveyor import Conveyor
    from conveyor.web import create_app

    app = Conveyor(sys.argv[2])
    with TestClient(create_app(app), base_url="http://localhost") as client:
        for path in ("/", "/metrics"):
            response = client.get(path)
            assert response.status_code == 200, (path, response.status_code)
        print(response.text)
    app.close()
""")


def test_the_dashboard_and_its_metrics_need_no_prometheus_client(seeded: str) -> None:
    """The web extra without prometheus-client: every page and ``/metrics``, whose
    text the dashboard writes itself."""
    code = CHILD.split("import conveyor.cli.queues")[0] + DASHBOARD
    proc = subprocess.run([sys.executable, "-c", code, "prometheus_client", seeded],
                          env=cli_env(), capture_output=True, text=True, timeout=90,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert 'conveyor_queue_jobs{queue="mail",state="available"} 2.0' in proc.stdout
    assert "conveyor_database_up 1.0" in proc.stdout
