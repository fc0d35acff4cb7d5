"""Issue 11, the dashboard's part: DNS rebinding (the Host check) and reverse proxies,
password length and the delay after a failed login, a port already in use."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from conveyor import Conveyor
from conveyor.cli import cli
from conveyor.web import BasicAuth, TokenAuth, create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from .conftest import Browser, browser_for
from .test_security import basic, snapshot

ROUTES = ["/", "/queues", "/jobs", "/jobs/31", "/failures", "/schedules", "/workers",
          "/bulk?action=retry&state=failed", "/healthz", "/metrics", "/static/app.css"]


# -- DNS rebinding -------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8787", "127.0.0.1.nip.io",
                                  "localhost.evil.example", ""])
def test_a_foreign_host_is_refused_on_every_route(world: Conveyor, host: str) -> None:
    """A page on another site rebound to 127.0.0.1 sends its own name as Host: it reads
    nothing (no jobs, no CSRF token, no health, no metrics) and changes nothing."""
    before = snapshot(world)
    for b in browser_for(world):
        token = b.token("/queues")  # a real token, as if leaked: still refused
        for path in ROUTES:
            response = b.get(path, headers={"host": host})
            assert response.status_code in (400, 421), (path, response.status_code)
            assert "csrf" not in response.text and "send_email" not in response.text
            assert response.text.count("\n") <= 1 and "not served here" in response.text
        response = b.client.post("/queues/mail/pause", data={"csrf_token": token},
                                 headers={"host": host, "origin": f"http://{host}"},
                                 follow_redirects=False)
        assert response.status_code in (400, 421)
    assert snapshot(world) == before


@pytest.mark.parametrize("host", ["localhost", "localhost:8787", "127.0.0.1", "127.0.0.1:1",
                                  "[::1]", "[::1]:8787", "LOCALHOST:80"])
def test_loopback_names_are_served_with_any_port(browser: Browser, host: str) -> None:
    assert browser.get("/jobs", headers={"host": host}).status_code == 200
    assert browser.get("/healthz", headers={"host": host}).status_code == 200


def test_allowed_hosts_from_code_and_environment(world: Conveyor,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    for b in browser_for(world, allowed_hosts=["ops.example.com", "*.internal"]):
        for host in ("ops.example.com", "ops.example.com:443", "a.b.internal"):
            assert b.get("/", headers={"host": host}).status_code == 200, host
        for host in ("example.com", "internal", "ops.example.com.evil"):
            assert b.get("/", headers={"host": host}).status_code == 421, host
    monkeypatch.setenv("CONVEYOR_DASHBOARD_ALLOWED_HOSTS", "jobs.corp, jobs2.corp")
    for b in browser_for(world):
        assert b.get("/", headers={"host": "jobs2.corp"}).status_code == 200
        assert b.get("/", headers={"host": "evil.example"}).status_code == 421
    for b in browser_for(world, allowed_hosts=["*"]):  # explicitly off
        assert b.get("/", headers={"host": "anything.example"}).status_code == 200


def test_behind_a_reverse_proxy_actions_work_with_the_right_settings(world: Conveyor) -> None:
    """nginx on https://ops.example.com in front of 127.0.0.1:8787."""
    public = "https://ops.example.com"
    # 1. The proxy keeps the Host header: allow that name.
    for b in browser_for(world, allowed_hosts=["ops.example.com"]):
        token = b.token("/queues")
        sent = {"host": "ops.example.com", "origin": public, "sec-fetch-site": "same-origin"}
        assert b.get("/queues", headers=sent).status_code == 200
        done = b.post("/queues/mail/pause", token=token, headers=sent)
        assert done.status_code == 303, done.text
    # 2. The proxy rewrites Host to the upstream address: trust the public origin.
    for b in browser_for(world, trusted_origins=[public]):
        token = b.token("/queues")
        sent = {"host": "127.0.0.1:8787", "origin": public, "sec-fetch-site": "same-origin"}
        assert b.post("/queues/mail/resume", token=token, headers=sent).status_code == 303
    # The default refuses both: the foreign Host, and a foreign origin's action.
    for b in browser_for(world):
        token = b.token("/queues")
        assert b.get("/queues", headers={"host": "ops.example.com"}).status_code == 421
        sent = {"host": "127.0.0.1:8787", "origin": public, "sec-fetch-site": "same-origin"}
        assert b.post("/queues/mail/pause", token=token, headers=sent).status_code == 403
    assert [q.paused for q in world.list_queues() if q.name == "mail"] == [False]


def test_dashboard_command_takes_allowed_hosts_and_adds_the_bind_host() -> None:
    from conveyor.cli.dashboard import served_hosts

    assert served_hosts("127.0.0.1", ()) == ()
    assert served_hosts("127.0.0.1", ("ops.example.com",)) == ("ops.example.com",)
    assert served_hosts("10.1.2.3", ("ops",)) == ("ops", "10.1.2.3")
    assert served_hosts("0.0.0.0", ()) == ()
    help_text = CliRunner().invoke(cli, ["dashboard", "-h"]).output
    assert "--allowed-host" in help_text and "--trusted-origin" in help_text


def test_dashboard_command_serves_only_allowed_hosts(tmp_path: Path) -> None:
    """A real ``conveyor dashboard`` process: loopback and --allowed-host answer, any
    other Host gets 421."""
    import httpx

    port = _free_port()
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    Conveyor(url).migrate()
    proc = subprocess.Popen([sys.executable, "-m", "conveyor", "dashboard", "--port", str(port),
                             "--url", url, "--allowed-host", "jobs.corp"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(base + "/healthz", timeout=1)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
                time.sleep(0.05)
        assert httpx.get(base + "/jobs").status_code == 200
        assert httpx.get(base + "/jobs", headers={"host": "jobs.corp"}).status_code == 200
        assert httpx.get(base + "/jobs", headers={"host": "evil.example"}).status_code == 421
    finally:
        proc.terminate()
        proc.wait(15)


# -- passwords -----------------------------------------------------------------------------


def test_basic_auth_needs_sixteen_characters_like_a_token() -> None:
    with pytest.raises(ValueError, match="16"):
        BasicAuth("ops", "x")
    with pytest.raises(ValueError, match="16"):
        BasicAuth("ops", "a" * 15)
    assert BasicAuth("ops", "a" * 16).password == "a" * 16
    TokenAuth("t" * 16)


def test_dashboard_command_refuses_a_short_password(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    monkeypatch.delenv("CONVEYOR_DASHBOARD_TOKEN", raising=False)
    monkeypatch.setenv("CONVEYOR_DASHBOARD_USER", "ops")
    monkeypatch.setenv("CONVEYOR_DASHBOARD_PASSWORD", "x")
    result = CliRunner().invoke(cli, ["dashboard", "--port", str(_free_port()),
                                      "--url", f"sqlite:///{tmp_path / 'x.db'}"])
    assert result.exit_code == 2, result.output
    assert "at least 16 characters" in result.output


def test_a_failed_login_waits_before_its_answer(world: Conveyor) -> None:
    password = "correct-horse-battery"
    for b in browser_for(world, auth=BasicAuth("ops", password), auth_failure_delay=0.5):
        started = time.monotonic()
        assert b.get("/jobs", headers=basic("ops", "wrong")).status_code == 401
        assert time.monotonic() - started >= 0.5
        started = time.monotonic()
        assert b.get("/jobs", headers=basic("ops", password)).status_code == 200
        assert b.get("/jobs").status_code == 401  # no credentials yet: no delay needed
        assert time.monotonic() - started < 0.5


# -- a port already in use -------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_port_in_use_is_a_usage_error_not_a_database_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    Conveyor(url).migrate()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "conveyor", "dashboard", "--port",
                               str(port), "--url", url], capture_output=True, text=True,
                              timeout=60)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"port {port}" in lines[0] and "in use" in lines[0], proc.stderr

