"""The dashboard's security promises: cross-site requests refused, auth enforced,
read-only mode changes nothing, output escaped, no inline script, no open bind."""

from __future__ import annotations

import base64
import re

import pytest
from click.testing import CliRunner

from conveyor import Conveyor, JobState
from conveyor.cli import cli
from conveyor.web import BasicAuth, TokenAuth, auth_from_env, is_loopback
from conveyor.web._security import CSRF_COOKIE, csrf_token

from .conftest import BASE, Browser, browser_for

#: Every action route, with a form that would be valid.
ACTIONS = [("/jobs/31/retry", {}), ("/jobs/45/cancel", {}), ("/jobs/44/discard", {}),
           ("/queues/mail/pause", {}), ("/queues/mail/concurrency", {"concurrency": "2"}),
           ("/schedules/nightly-report/pause", {}), ("/schedules/nightly-report/trigger", {}),
           ("/bulk", {"action": "retry", "state": "failed"})]


def snapshot(app: Conveyor) -> tuple[object, ...]:
    jobs = tuple((j.id, j.state) for j in app.list_jobs(limit=500))
    queues = tuple((q.name, q.paused, q.concurrency) for q in app.list_queues())
    schedules = tuple((s.row.name, s.row.paused) for s in app.list_schedules())
    return jobs, queues, schedules


def basic(user: str, password: str) -> dict[str, str]:
    return {"authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.mark.parametrize("headers", [
    {"sec-fetch-site": "cross-site", "origin": "https://evil.example"},
    {"sec-fetch-site": "same-site", "origin": "http://sub.localhost"},
    {"sec-fetch-site": "cross-site"},  # no Origin: Sec-Fetch-Site alone decides
    {"origin": "https://evil.example", "sec-fetch-site": ""},
    {"origin": "null"},
], ids=["cross-site", "same-site", "fetch-site-only", "origin-only", "null-origin"])
def test_cross_site_posts_are_rejected(browser: Browser, world: Conveyor,
                                       headers: dict[str, str]) -> None:
    before = snapshot(world)
    token = browser.token("/queues")
    for path, form in ACTIONS:
        sent = {k: v for k, v in headers.items() if v}
        response = browser.client.post(path, data={"csrf_token": token, **form},
                                       headers=sent, follow_redirects=False)
        assert response.status_code == 403, (path, headers)
    assert snapshot(world) == before


def test_posts_need_a_valid_csrf_token(browser: Browser, world: Conveyor) -> None:
    before = snapshot(world)
    for path, form in ACTIONS:
        assert browser.post(path, form, token="").status_code == 403
        assert browser.post(path, form, token="0" * 64).status_code == 403
    # A token minted for another nonce (another browser) does not fit this one's cookie.
    for other in browser_for(world):
        foreign = other.token("/queues")
    assert browser.post("/queues/mail/pause", token=foreign).status_code == 403
    assert browser.client.get("/queues/mail/pause").status_code == 405  # GET never acts
    assert snapshot(world) == before
    assert browser.post("/queues/mail/pause").status_code == 303  # the real token works


def test_auth_is_required_when_configured(world: Conveyor) -> None:
    for b in browser_for(world, auth=BasicAuth("ops", "s3cret-pass-long-enough")):
        denied = b.get("/")
        assert denied.status_code == 401 and "Basic" in denied.headers["www-authenticate"]
        assert b.get("/jobs", headers=basic("ops", "wrong")).status_code == 401
        assert b.get("/jobs", headers=basic("other", "s3cret-pass-long-enough")).status_code == 401
        assert b.get("/metrics").status_code == 401
        assert b.client.post("/queues/mail/pause", headers={"origin": BASE}).status_code == 401
        assert b.get("/healthz").status_code == 200  # load balancers probe it anonymously
        b.client.headers.update(basic("ops", "s3cret-pass-long-enough"))
        assert b.get("/").status_code == 200
        assert b.post("/queues/mail/pause").status_code == 303
    token = "t" * 24
    for b in browser_for(world, auth=TokenAuth(token)):
        assert b.get("/metrics").status_code == 401
        assert b.get("/metrics", headers={"authorization": f"Bearer {token}"}).status_code == 200
        assert b.get("/", headers=basic("anyone", token)).status_code == 200
        assert b.get("/", headers={"authorization": "Bearer " + "x" * 24}).status_code == 401


def test_auth_from_environment() -> None:
    assert auth_from_env({}) is None
    token = auth_from_env({"CONVEYOR_DASHBOARD_TOKEN": "a" * 20})
    assert isinstance(token, TokenAuth)
    user = auth_from_env({"CONVEYOR_DASHBOARD_USER": "u",
                          "CONVEYOR_DASHBOARD_PASSWORD": "p" * 16})
    assert user == BasicAuth("u", "p" * 16)
    with pytest.raises(ValueError, match="both"):
        auth_from_env({"CONVEYOR_DASHBOARD_USER": "u"})
    with pytest.raises(ValueError, match="16"):
        TokenAuth("short")


def test_read_only_mode_rejects_every_action(world: Conveyor) -> None:
    before = snapshot(world)
    secret = b"k" * 32
    for b in browser_for(world, read_only=True, secret=secret):
        b.get("/")  # sets the CSRF cookie; read-only pages carry no token, so mint one
        token = csrf_token(secret, b.client.cookies[CSRF_COOKIE])
        for path, form in ACTIONS:
            assert b.post(path, form, token=token).status_code == 403, path
        for page in ("/queues", "/jobs/31", "/failures", "/schedules", "/jobs"):
            html = b.get(page).text
            assert "read-only" in html and 'method="post"' not in html, page
            assert "Retry all" not in html
    assert snapshot(world) == before


def test_access_hook_grants_read_or_nothing(world: Conveyor) -> None:
    roles = {"alice": "write", "bob": "read"}

    def access(request):
        return roles.get(request.headers.get("x-user", ""), "deny")

    for b in browser_for(world, access=access):
        assert b.get("/", headers={"x-user": "mallory"}).status_code == 403
        assert b.get("/", headers={"x-user": "bob"}).status_code == 200
        b.client.headers["x-user"] = "bob"
        assert b.post("/queues/mail/pause", token="x" * 64).status_code == 403
        b.client.headers["x-user"] = "alice"
        assert b.post("/queues/mail/pause").status_code == 303


def test_script_in_args_renders_inert(browser: Browser, world: Conveyor) -> None:
    job = next(j for j in world.list_jobs(task="resize", limit=100) if "<" in j.args[0])
    for path in (f"/jobs/{job.id}", "/jobs", "/jobs?q=script"):
        html = browser.get(path).text
        assert "<script>alert" not in html and "&lt;script&gt;alert(" in html, path
    subject = browser.get("/jobs?task=send_email").text
    assert "<b>aboard</b>" not in subject and "&lt;b&gt;aboard&lt;/b&gt;" in subject


def test_no_inline_script_and_strict_headers(browser: Browser) -> None:
    for path in ("/", "/queues", "/jobs", "/jobs/1", "/failures", "/schedules", "/limiters",
                 "/workers"):
        response = browser.get(path)
        scripts = re.findall(r"<script\b[^>]*>", response.text)
        assert scripts and all("src=" in s for s in scripts), path
        assert not re.search(r"\son[a-z]+\s*=", response.text), f"inline handler on {path}"
        assert not re.search(r'\sstyle\s*=', response.text), f"inline style on {path}"
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert "frame-ancestors 'none'" in csp
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["x-content-type-options"] == "nosniff"
    cookie = browser.get("/").headers.get("set-cookie", "")
    assert not cookie or ("HttpOnly" in cookie and "SameSite=Strict" in cookie)


def test_secrets_are_redacted_and_long_args_truncated(browser: Browser, world: Conveyor) -> None:
    charge = world.list_jobs(task="charge", limit=1)[0]
    for path in (f"/jobs/{charge.id}", "/jobs?task=charge"):
        html = browser.get(path).text
        assert "tok_" not in html and "[redacted]" in html
    long = world.tasks["resize"].enqueue("x" * 5000)
    listing = browser.get("/jobs?task=resize").text
    assert "x" * 200 not in listing and "x" * 100 in listing
    assert "x" * 5000 in browser.get(f"/jobs/{long.id}").text


def test_no_route_enqueues_jobs_or_edits_them_outside_a_retry(browser: Browser) -> None:
    """The one edit there is, edit and retry (``/jobs/ID/edit``), gives a job a retry
    would take new arguments for its own task (tests/test_edit_retry.py)."""
    for path in ("/enqueue", "/jobs", "/jobs/1", "/jobs/1/args", "/jobs/1/update", "/tasks"):
        assert browser.post(path).status_code in (404, 405), path


def test_loopback_detection_and_open_bind_refusal(monkeypatch: pytest.MonkeyPatch,
                                                  sqlite_url: str) -> None:
    for host in ("127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "10.0.0.5", "example.com", "192.168.1.2"):
        assert not is_loopback(host), host
    for name in ("CONVEYOR_DASHBOARD_TOKEN", "CONVEYOR_DASHBOARD_USER",
                 "CONVEYOR_DASHBOARD_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    for host in ("0.0.0.0", "::", "192.168.1.2"):
        result = CliRunner().invoke(cli, ["dashboard", "--host", host, "--url", sqlite_url])
        assert result.exit_code == 2, result.output
        assert "refusing to serve the dashboard" in result.output


@pytest.fixture
def sqlite_url(tmp_path: object) -> str:
    return f"sqlite:///{tmp_path}/x.db"


def test_job_states_unchanged_by_get_requests(browser: Browser, world: Conveyor) -> None:
    before = snapshot(world)
    for path in ("/bulk?action=discard&state=failed", "/bulk?action=retry", "/jobs/31/retry"):
        browser.get(path)
    assert snapshot(world) == before
    assert world.get_job(31).state == JobState.DISCARDED  # type: ignore[union-attr]
