"""Issue 11, the dashboard's part: DNS rebinding (the Host check) and reverse proxies,
password length and the delay after a failed login, a port already in use."""

from __future__ import annotations

import functools
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from conveyor import Conveyor
from conveyor.cli import cli
from conveyor.web import BasicAuth, TokenAuth

from ..conftest import WaitFor
from ..test_postgres_backend_smoke import _allow_connections
from .conftest import Browser, browser_for
from .test_security import basic, snapshot

ROUTES = ["/", "/queues", "/jobs", "/jobs/31", "/failures", "/schedules", "/limiters", "/workers",
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
    assert served_hosts("0.0.0.0", ()) == ("0.0.0.0",)  # the URL the command prints
    assert served_hosts("127.0.0.2", ()) == ("127.0.0.2",)
    assert served_hosts("[::1]", ()) == ()
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



# -- integers beyond 64 bits ------------------------------------------------------------------

HUGE = ["9223372036854775808", "99999999999999999999999999", "1" + "0" * 5000, "-1", "0",
        "1e3", "٣"]


@pytest.mark.parametrize("value", HUGE)
def test_huge_integers_in_paths_queries_and_forms_are_answered(browser: Browser, world: Conveyor,
                                                               value: str) -> None:
    before = snapshot(world)
    assert browser.get(f"/jobs/{value}").status_code == 404
    for action in ("retry", "cancel", "discard"):
        assert browser.post(f"/jobs/{value}/{action}").status_code == 404
    for query in (f"before={value}", f"after={value}", f"limit={value}",
                  f"before={value}&after={value}&limit={value}&state=failed"):
        page = browser.get(f"/jobs?{query}")
        assert page.status_code == 200, (query, page.text[:200])
        assert "send_email" in page.text or "charge" in page.text
    assert browser.get(f"/bulk?action=retry&state=failed&limit={value}").status_code == 200
    response = browser.post("/queues/mail/concurrency", {"concurrency": value})
    assert response.status_code == 303
    flash = browser.get("/queues").text
    assert "Concurrency must be a whole number from 1 to 100,000." in flash
    assert snapshot(world) == before


def test_the_largest_64_bit_id_is_simply_not_found(browser: Browser) -> None:
    assert browser.get("/jobs/9223372036854775807").status_code == 404
    assert browser.post("/jobs/9223372036854775807/retry").status_code == 404
    ok = browser.get("/jobs?before=9223372036854775807")
    assert ok.status_code == 200 and "send_email" in ok.text


# -- bulk actions ------------------------------------------------------------------------------


def _states(app: Conveyor) -> dict[int, str]:
    return {j.id: j.state.value for j in app.list_jobs(limit=500)}


def test_retry_all_on_an_unfiltered_page_never_reruns_completed_jobs(browser: Browser,
                                                                     world: Conveyor) -> None:
    before = _states(world)
    completed = [i for i, s in before.items() if s == "completed"]
    failed = [i for i, s in before.items() if s in ("retryable", "discarded", "cancelled")]
    assert len(completed) > 20 and failed
    page = browser.get("/bulk?action=retry&back=/jobs").text
    assert f"Retry {len(failed)} job(s)?" in page, page
    states = page.split('id="bulk-states">', 1)[1].split("</p>", 1)[0]
    assert "retryable" in states and "discarded" in states and "cancelled" in states
    assert "completed" not in states
    assert "Completed jobs are never retried in bulk" in page
    assert browser.post("/bulk", {"action": "retry", "back": "/jobs"}).status_code == 303
    after = _states(world)
    assert all(after[i] == "completed" for i in completed)  # not one re-run
    assert all(after[i] == "available" for i in failed)
    assert f"{len(failed)} job(s) retried" in browser.get("/jobs").text


def test_completed_jobs_are_retried_only_when_named(browser: Browser, world: Conveyor) -> None:
    completed = [i for i, s in _states(world).items() if s == "completed"]
    page = browser.get("/bulk?action=retry&state=completed&task=resize").text
    resize = [j.id for j in world.list_jobs(task="resize", state="completed", limit=500)]
    assert f"Retry {len(resize)} job(s)?" in page and "<strong>completed</strong>" in page
    form = {"action": "retry", "state": "completed", "task": "resize"}
    assert browser.post("/bulk", form).status_code == 303
    after = _states(world)
    assert {after[i] for i in resize} == {"available"}
    assert all(after[i] == "completed" for i in completed if i not in resize)


def test_discard_all_on_an_unfiltered_page_touches_only_failed_jobs(browser: Browser,
                                                                    world: Conveyor) -> None:
    before = _states(world)
    waiting = [i for i, s in before.items() if s in ("available", "scheduled")]
    retryable = [i for i, s in before.items() if s == "retryable"]
    assert waiting and retryable
    page = browser.get("/bulk?action=discard&back=/jobs").text
    assert f"Discard {len(retryable)} job(s)?" in page
    assert "<strong>retryable</strong>" in page and "<strong>available</strong>" not in page
    assert browser.post("/bulk", {"action": "discard"}).status_code == 303
    after = _states(world)
    assert all(after[i] == before[i] for i in waiting)
    assert all(after[i] == "discarded" for i in retryable)
    # Named explicitly, available jobs can be discarded.
    page = browser.get("/bulk?action=discard&state=available").text
    assert "<strong>available</strong>" in page
    assert browser.post("/bulk", {"action": "discard", "state": "available"}).status_code == 303
    assert all(_states(world)[i] == "discarded" for i in waiting if before[i] == "available")


def test_a_state_an_action_cannot_change_is_said_and_changes_nothing(browser: Browser,
                                                                    world: Conveyor) -> None:
    before = _states(world)
    page = browser.get("/bulk?action=discard&state=completed").text
    assert "Discard 0 job(s)?" in page and "never changes completed jobs" in page
    assert 'id="confirm-bulk"' not in page
    assert browser.post("/bulk", {"action": "discard", "state": "completed"}).status_code == 303
    assert _states(world) == before


# -- the database down ---------------------------------------------------------------------

PAGES = ["/", "/queues", "/jobs", "/jobs?state=failed", "/jobs/1", "/failures", "/schedules",
         "/limiters", "/workers", "/bulk?action=retry&state=failed",
         "/workflows/0b7e5f0e-6a55-4a57-9a0c-2f1d2b1c9e11", "/batches/1"]
FAST_ENOUGH = 3.0


def _database_up(text: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    families = {f.name: f for f in text_string_to_metric_families(text)}
    return float(families["conveyor_database_up"].samples[0].value)


def _assert_down_everywhere(b: Browser) -> None:
    token = b.token("/")  # the 503 page still carries one
    for path in PAGES:
        started = time.monotonic()
        response = b.get(path)
        took = time.monotonic() - started
        assert took < FAST_ENOUGH, (path, took)
        assert response.status_code == 503, (path, response.status_code, response.text[:200])
        assert "The database is unreachable" in response.text, path
        assert "Internal Server Error" not in response.text
    for path in ("/queues/mail/pause", "/jobs/1/retry", "/batches/1/jobs/1/retry",
                 "/workflows/0b7e5f0e-6a55-4a57-9a0c-2f1d2b1c9e11/cancel"):
        started = time.monotonic()
        response = b.post(path, token=token)
        assert time.monotonic() - started < FAST_ENOUGH
        assert response.status_code == 503 and "unreachable" in response.text, path
    started = time.monotonic()
    metrics = b.get("/metrics")
    assert time.monotonic() - started < FAST_ENOUGH
    assert metrics.status_code == 200 and _database_up(metrics.text) == 0
    started = time.monotonic()
    assert b.get("/healthz").status_code == 503
    assert time.monotonic() - started < FAST_ENOUGH


def _closed_port() -> int:
    return _free_port()  # nothing listens there once the probe socket is closed


@pytest.mark.parametrize("where", ["postgres-closed-port", "sqlite-missing-directory",
                                   "sqlite-not-a-database"])
def test_every_page_answers_fast_when_the_database_is_unreachable(where: str,
                                                                  tmp_path: Path) -> None:
    if where == "postgres-closed-port":
        url = f"postgresql://postgres@127.0.0.1:{_closed_port()}/conveyor"
    elif where == "sqlite-missing-directory":
        url = f"sqlite:///{tmp_path / 'gone' / 'jobs.db'}"
    else:
        (tmp_path / "jobs.db").write_bytes(b"this is not a database\n" * 200)
        url = f"sqlite:///{tmp_path / 'jobs.db'}"
    app = Conveyor(url)
    try:
        for b in browser_for(app):
            _assert_down_everywhere(b)
    finally:
        app.close()
    assert not (tmp_path / "gone").exists()  # nothing created on the way


def test_metrics_says_the_database_is_up(browser: Browser) -> None:
    response = browser.get("/metrics")
    assert response.status_code == 200 and _database_up(response.text) == 1


@pytest.fixture
def own_postgres(postgres_admin_url: str) -> Iterator[tuple[str, str]]:
    """A database of this test alone (it will be cut off), and the admin URL."""
    import secrets

    import psycopg
    from psycopg import sql

    from tests import _pg
    from tests.conftest import migrate

    name = f"conveyor_down_{secrets.token_hex(4)}"
    with psycopg.connect(postgres_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = _pg.with_database(postgres_admin_url, name)
    try:
        migrate(url)
        yield url, name
    finally:
        with psycopg.connect(postgres_admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))


def _page_ok(b: Browser, path: str) -> bool:
    return bool(b.get(path).status_code == 200)


_cut_off = _allow_connections  # ALLOW_CONNECTIONS, and its backends terminated


@pytest.mark.postgres
def test_postgres_going_away_mid_run_gives_fast_503s_then_recovers(
        own_postgres: tuple[str, str], postgres_admin_url: str, wait_for: WaitFor) -> None:
    url, name = own_postgres
    app = Conveyor(url)
    try:
        for b in browser_for(app):
            assert b.get("/workers").status_code == 200
            assert _database_up(b.get("/metrics").text) == 1
            _cut_off(postgres_admin_url, name, allow=False)
            try:
                _assert_down_everywhere(b)
            finally:
                _cut_off(postgres_admin_url, name, allow=True)
            wait_for(functools.partial(_page_ok, b, "/workers"), timeout=30,
                     message="the dashboard did not recover")
            assert _database_up(b.get("/metrics").text) == 1
    finally:
        app.close()


# -- "0/min" beside a thousand completed jobs ----------------------------------------------------


def test_overview_says_why_per_minute_figures_are_missing(browser: Browser,
                                                          world: Conveyor) -> None:
    """The seeded world ran its jobs with metrics_retention=0: no rollup exists."""
    completed = world.count_jobs()["completed"]
    assert completed > 20
    page = browser.get("/").text
    assert "no worker has reported metrics yet" in page
    assert f"{completed:,} completed" in page
    assert '<span class="value">0</span>' not in page.split('class="summary"', 1)[1].split(
        "</section>", 1)[0]


def test_status_says_what_is_known_instead_of_zero_per_minute(world: Conveyor) -> None:
    import json

    completed = world.count_jobs()["completed"]
    result = CliRunner().invoke(cli, ["status", "--url", world.url], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "0/min" not in result.output
    assert "no worker has reported metrics yet" in result.output
    assert f"{completed:,} completed" in result.output
    doc = json.loads(CliRunner().invoke(cli, ["status", "--json", "--url", world.url]).output)
    assert doc["last_hour"]["per_minute"] is None
    assert "no worker has reported metrics" in doc["last_hour"]["missing"]


def test_known_figures_are_shown_once_metrics_exist(world: Conveyor) -> None:
    from ._seed import seed_history

    seed_history(world, minutes=10)
    for b in browser_for(world):
        page = b.get("/").text
        assert "no worker has reported metrics yet" not in page and "jobs / minute" in page
    result = CliRunner().invoke(cli, ["status", "--url", world.url], env={"COLUMNS": "200"})
    assert "/min" in result.output and "no worker has reported" not in result.output


def test_security_doc_states_the_threat_model_and_every_setting() -> None:
    text = (Path(__file__).parents[2] / "docs" / "security.md").read_text()
    for needle in ("Threat model", "127.0.0.1", "TokenAuth", "BasicAuth", "16 characters",
                   "read_only", "CSRF", "Origin", "allowed_hosts", "--allowed-host",
                   "CONVEYOR_DASHBOARD_ALLOWED_HOSTS", "trusted_origins", "reverse proxy",
                   "Content-Security-Policy", "redact", "421", "auth_failure_delay"):
        assert needle in text, needle
