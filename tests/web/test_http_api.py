"""The HTTP API (``/api/v1/``) over ASGI on both backends: every endpoint, every refusal
(tokens, JSON, types, tasks, signatures, sizes, states, parameters), the Host check.
A real server, the Node.js client, long polls woken by a worker and a dead database are
in test_http_api_server.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from conveyor import Conveyor, JobState, StateChange
from conveyor.web import ApiToken, TokenAuth, create_app

from ._api import READ, WRITE, auth, client_for, make_app

API = "/api/v1"


@pytest.fixture
def world(db_url: str) -> Iterator[tuple[Conveyor, list[StateChange]]]:
    app, seen = make_app(db_url)
    try:
        yield app, seen
    finally:
        app.close()


@pytest.fixture
def api(world: tuple[Conveyor, list[StateChange]]) -> Iterator[Any]:
    with client_for(world[0]) as client:
        yield client


def post(client: Any, path: str, body: Any = None, token: str = WRITE, **kw: Any) -> Any:
    return client.post(API + path, json=body, headers=auth(token), **kw)


def get(client: Any, path: str, token: str = WRITE, **kw: Any) -> Any:
    return client.get(API + path, headers=auth(token), **kw)


def refused(response: Any, status: int, code: str, field: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body: dict[str, Any] = response.json()
    assert body["error"] == code and body["message"], body
    if field is not None:
        assert body.get("field") == field, body
    return body


def count(app: Conveyor) -> int:
    return sum(app.count_jobs().values())


# -- enqueue ----------------------------------------------------------------------------------

def test_enqueue_one_job_with_every_option(api: Any, world: Any) -> None:
    app, _ = world
    parent = post(api, "/jobs", {"task": "resize", "args": ["/a.png"]}).json()
    run_at = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    made = post(api, "/jobs", {
        "task": "send_email", "args": ["ada@example.com"], "kwargs": {"subject": "hi"},
        "queue": "urgent", "priority": 5, "run_at": run_at, "max_attempts": 3,
        "tags": ["welcome"], "depends_on": [parent["id"]]})
    assert made.status_code == 201, made.text
    job = made.json()
    stored = app.get_job(job["id"])
    assert stored is not None and stored.to_dict() == job
    assert (job["task"], job["queue"], job["priority"], job["max_attempts"]) == (
        "send_email", "urgent", 5, 3)
    assert job["args"] == ["ada@example.com"] and job["kwargs"] == {"subject": "hi"}
    assert job["tags"] == ["welcome"] and job["state"] == "pending"  # waits on its parent
    first = post(api, "/jobs", {"task": "send_email", "args": ["x", "y"],
                                "unique_key": "ada-hi"}).json()
    again = post(api, "/jobs", {"task": "send_email", "args": ["x", "z"],
                                "unique_key": "ada-hi"}).json()
    assert again["id"] == first["id"] and again["duplicate"] is True
    delayed = post(api, "/jobs", {"task": "resize", "args": ["/b"], "delay": 3600}).json()
    assert delayed["state"] == "scheduled"
    expiring = post(api, "/jobs", {"task": "resize", "args": ["/c"], "expires_in": 60}).json()
    assert expiring["expires_at"] is not None
    routed = post(api, "/jobs", {"task": "resize", "args": ["/d"],
                                 "requires": {"gpu": "a100"}}).json()
    assert routed["requires"] == {"gpu": "a100"}
    assert "set-cookie" not in made.headers  # no cookies: no CSRF surface


def test_bulk_enqueue_is_one_transaction(api: Any, world: Any) -> None:
    app, _ = world
    made = post(api, "/jobs", [{"task": "resize", "args": [f"/{i}"]} for i in range(5)])
    assert made.status_code == 201
    jobs = made.json()
    assert [j["args"] for j in jobs] == [[f"/{i}"] for i in range(5)]
    before = count(app)
    # the second job's arguments do not fit: nothing at all is written
    bad = post(api, "/jobs", [{"task": "resize", "args": ["/x"]},
                              {"task": "send_email", "kwargs": {"to": "a"}}])
    body = refused(bad, 422, "arguments", "[1].kwargs")
    assert body["argument"] == "subject"
    # a dependency that does not exist is found by the database itself: still all or none
    bad = post(api, "/jobs", [{"task": "resize", "args": ["/y"]},
                              {"task": "resize", "args": ["/z"], "depends_on": [10**12]}])
    refused(bad, 422, "invalid", "depends_on")
    assert count(app) == before
    refused(post(api, "/jobs", []), 422, "invalid", "body")
    refused(post(api, "/jobs", [{"task": "resize", "args": ["/"]}] * 1001), 422, "invalid",
            "body")
    refused(post(api, "/jobs", [{"task": "resize", "args": ["/"]}, 7]), 422, "invalid", "[1]")
    assert count(app) == before


def test_arguments_are_checked_against_the_signature(api: Any) -> None:
    body = refused(post(api, "/jobs", {"task": "send_email", "args": ["a"],
                                       "kwargs": {"subject": "x", "cc": "b"}}), 422,
                   "arguments", "kwargs")
    assert body["argument"] == "cc" and "send_email" in body["message"]
    body = refused(post(api, "/jobs", {"task": "resize", "args": ["/a", 1, 2]}), 422,
                   "arguments", "args")
    assert "too many positional arguments" in body["message"]


def test_an_unknown_task_lists_the_known_ones(api: Any, world: Any) -> None:
    body = refused(post(api, "/jobs", {"task": "send_emails"}), 422, "unknown_task", "task")
    assert body["known"] == ["resize", "send_email"]
    assert "send_email" in body["message"]
    assert count(world[0]) == 0


def test_without_tasks_any_valid_name_is_accepted(db_url: str) -> None:
    """A dashboard serving a bare ``Conveyor(url)``, as ``conveyor enqueue`` without --app:
    the workers' app decides; the name is still checked, and the app learns no task."""
    bare = Conveyor(db_url)
    try:
        with client_for(bare) as client:
            made = post(client, "/jobs", {"task": "billing.charge", "args": [1, {"x": 2}]})
            assert made.status_code == 201 and made.json()["task"] == "billing.charge"
            refused(post(client, "/jobs", {"task": "no spaces"}), 422, "invalid", "task")
            assert bare.tasks == {}
            assert bare.get_job(made.json()["id"]) is not None
    finally:
        bare.close()


@pytest.mark.parametrize(("field", "value"), [
    ("task", 5), ("args", {"a": 1}), ("kwargs", [1]), ("queue", 1), ("queue", "bad name!"),
    ("priority", "high"), ("priority", True), ("priority", 10**6), ("delay", "soon"),
    ("delay", -1), ("run_at", "tomorrow"), ("run_at", "2030-01-01T00:00:00"),
    ("max_attempts", 1.5), ("max_attempts", 0), ("unique_key", 7), ("tags", "urgent"),
    ("tags", [1]), ("depends_on", ["a"]), ("depends_on", 3), ("expires_in", "soon"),
    ("expires_in", 0), ("expires_in", -5), ("expires_in", 1e12),
    ("expires_at", "2030-01-01T00:00:00"), ("expires_at", 5), ("requires", "gpu=a100"),
    ("requires", {"gpu": 1}), ("requires", {"bad key": "x"}),
    ("requires", {f"k{i}": "v" for i in range(17)}),
])
def test_a_wrong_type_or_value_is_422_naming_the_field(api: Any, world: Any, field: str,
                                                      value: Any) -> None:
    body = {"task": "resize", "args": ["/a"], field: value}
    refused(post(api, "/jobs", body), 422, "invalid", field)
    assert count(world[0]) == 0


def test_unknown_fields_and_conflicts_are_refused(api: Any) -> None:
    # a field this version does not know (a typo, or a newer client's option)
    refused(post(api, "/jobs", {"task": "resize", "args": ["/a"], "fair_key": "x"}), 422,
            "invalid", "fair_key")
    refused(post(api, "/jobs", {"args": []}), 422, "invalid", "task")
    refused(post(api, "/jobs", "resize"), 422, "invalid", "body")
    when = (datetime.now(UTC) + timedelta(minutes=5)).isoformat()
    body = refused(post(api, "/jobs", {"task": "resize", "args": ["/a"], "delay": 5,
                                       "run_at": when}), 422, "invalid")
    assert "delay" in body["message"] and "run_at" in body["message"]


def test_bad_json_is_400_and_other_media_types_415(api: Any) -> None:
    for raw in (b"{", b'{"task": "resize",}', b"\xff\xfe", b""):
        refused(api.post(API + "/jobs", content=raw, headers={
            **auth(), "content-type": "application/json"}), 400, "bad_json")
    refused(api.post(API + "/jobs", content=b"task=resize", headers={
        **auth(), "content-type": "application/x-www-form-urlencoded"}), 415,
        "unsupported_media_type")


def test_a_body_over_the_cap_is_413_however_it_is_sent(api: Any, world: Any) -> None:
    huge = json.dumps({"task": "resize", "args": ["x" * (1024 * 1024)]}).encode()
    refused(api.post(API + "/jobs", content=huge, headers={
        **auth(), "content-type": "application/json"}), 413, "too_large")

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"task": "resize", "args": ["'
        for _ in range(300):
            yield b"y" * 4096
        yield b'"]}'

    refused(api.post(API + "/jobs", content=chunks(), headers={
        **auth(), "content-type": "application/json"}), 413, "too_large")
    # a Content-Length that understates the body does not get it past the cap either
    refused(api.post(API + "/jobs", content=huge, headers={
        **auth(), "content-type": "application/json", "content-length": "10"}), 413,
        "too_large")
    assert count(world[0]) == 0


# -- tokens and the gate ----------------------------------------------------------------------

def test_tokens_are_required_and_read_only_ones_only_read(api: Any, world: Any) -> None:
    job = post(api, "/jobs", {"task": "resize", "args": ["/a"]}).json()
    for headers in ({}, {"authorization": "Bearer " + WRITE[:-1] + "x"},
                    {"authorization": "Basic d3JpdGU6eA=="}, {"authorization": WRITE}):
        response = api.get(f"{API}/jobs/{job['id']}", headers=headers)
        refused(response, 401, "unauthorized")
        assert response.headers["www-authenticate"].startswith("Bearer")
    assert get(api, f"/jobs/{job['id']}", READ).status_code == 200
    assert get(api, "/queues", READ).status_code == 200
    for path in ("/jobs", f"/jobs/{job['id']}/cancel", "/queues/default/pause"):
        refused(post(api, path, {"task": "resize", "args": ["/b"]}, READ), 403, "forbidden")
    assert count(world[0]) == 1
    assert world[0].get_job(job["id"]).state is JobState.AVAILABLE


def test_a_read_only_dashboard_refuses_every_api_change(world: Any) -> None:
    with client_for(world[0], read_only=True) as client:
        refused(post(client, "/jobs", {"task": "resize", "args": ["/a"]}), 403, "forbidden")
        assert get(client, "/jobs").status_code == 200


def test_no_token_configured_means_no_api(world: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONVEYOR_API_TOKEN", raising=False)
    monkeypatch.delenv("CONVEYOR_API_READONLY_TOKEN", raising=False)
    with client_for(world[0], api_tokens=None) as client:
        for path in ("/jobs", "/jobs/1", "/openapi.json", "/queues"):
            refused(get(client, path), 404, "api_disabled")
        refused(post(client, "/jobs", {"task": "resize", "args": ["/a"]}), 404, "api_disabled")
    monkeypatch.setenv("CONVEYOR_API_TOKEN", WRITE)
    monkeypatch.setenv("CONVEYOR_API_READONLY_TOKEN", f"{READ},{READ}-2")
    with client_for(world[0], api_tokens=None) as client:
        assert post(client, "/jobs", {"task": "resize", "args": ["/a"]}).status_code == 201
        assert get(client, "/jobs", READ + "-2").status_code == 200
        refused(post(client, "/jobs", {"task": "resize", "args": ["/a"]}, READ), 403,
                "forbidden")


def test_short_or_malformed_tokens_are_refused_at_creation(world: Any) -> None:
    for bad in ("short-token", "with a space in it!", "comma,separated,token"):
        with pytest.raises(ValueError, match="API token"):
            create_app(world[0], api_tokens=[bad])
    with pytest.raises(ValueError, match="16 characters"):
        ApiToken("x" * 15, read_only=True)


def test_the_dashboard_login_and_the_api_tokens_are_separate(world: Any) -> None:
    dashboard_token = "d" * 24
    with client_for(world[0], auth=TokenAuth(dashboard_token)) as client:
        assert get(client, "/jobs").status_code == 200  # the dashboard's auth is not asked
        refused(get(client, "/jobs", dashboard_token), 401, "unauthorized")
        assert client.get("/jobs", headers=auth()).status_code == 401  # pages: not opened
        assert client.get("/jobs", headers=auth(dashboard_token)).status_code == 200


def test_the_host_check_applies(world: Any) -> None:
    with client_for(world[0]) as client:
        response = client.get(API + "/jobs", headers={**auth(), "host": "evil.example"})
        refused(response, 421, "host_not_served")
        assert "jobs" not in response.json()
        assert client.get(API + "/jobs", headers={**auth(), "host": "127.0.0.1:8787"}
                          ).status_code == 200
    with client_for(world[0], allowed_hosts=["jobs.example.com"]) as client:
        assert client.get(API + "/jobs", headers={**auth(), "host": "jobs.example.com"}
                          ).status_code == 200


# -- reading jobs -----------------------------------------------------------------------------

def test_get_one_job_or_404(api: Any) -> None:
    job = post(api, "/jobs", {"task": "resize", "args": ["/a"],
                              "kwargs": {"width": 10}}).json()
    assert get(api, f"/jobs/{job['id']}").json() == job
    refused(get(api, "/jobs/999999"), 404, "not_found")
    for bad in ("abc", "0", "-1", "99999999999999999999"):
        refused(get(api, f"/jobs/{bad}"), 400, "bad_parameter", "job_id")


def test_secrets_are_redacted_as_on_the_dashboard(api: Any) -> None:
    made = post(api, "/jobs", {"task": "resize", "args": [{"password": "hunter2hunter2"}],
                               "kwargs": {"width": 1}})
    assert made.json()["args"] == [{"password": "[redacted]"}]
    shown = get(api, f"/jobs/{made.json()['id']}").json()
    assert shown["args"] == [{"password": "[redacted]"}] and shown["kwargs"] == {"width": 1}


def test_list_filters_and_pages_through_everything(api: Any, world: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    app, _ = world
    ids = [post(api, "/jobs", {"task": "resize", "args": [f"/{i}"],
                               "tags": ["even" if i % 2 == 0 else "odd"]}).json()["id"]
           for i in range(7)]
    mail = post(api, "/jobs", {"task": "send_email", "args": ["a", "b"]}).json()["id"]
    app.cancel_job(ids[0])
    seen: list[int] = []
    path: str | None = API + "/jobs?task=resize&limit=3"
    pages = 0
    while path is not None:
        page = api.get(path, headers=auth()).json()
        assert len(page["jobs"]) <= 3
        seen += [j["id"] for j in page["jobs"]]
        path, pages = page["next"], pages + 1
        assert (path is None) == (page["next_before_id"] is None)
    assert seen == sorted(ids, reverse=True) and pages == 3
    assert [j["id"] for j in get(api, "/jobs?queue=mail").json()["jobs"]] == [mail]
    assert [j["id"] for j in get(api, "/jobs?tag=odd").json()["jobs"]] == ids[5::-2][:3]
    assert [j["id"] for j in get(api, "/jobs?state=cancelled").json()["jobs"]] == [ids[0]]
    older = get(api, f"/jobs?before_id={ids[2]}").json()["jobs"]
    assert [j["id"] for j in older] == [ids[1], ids[0]]
    from conveyor._app import search

    monkeypatch.setattr(search, "SCAN", 3)  # by tag: the newest 3 jobs only (mail, 6, 5)
    assert [j["id"] for j in get(api, "/jobs?tag=odd").json()["jobs"]] == [ids[5]]
    assert [j.id for j in app.list_jobs(tag="odd")] == [ids[5]]


def test_next_goes_on_past_windows_without_a_match(api: Any, world: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 31: by tag or arg, each request reads one window of ``SCAN`` ids; ``next``
    goes on below a window that held no match, so paging reaches the oldest job."""
    from conveyor._app import search

    app, _ = world
    ids = [post(api, "/jobs", {"task": "resize", "args": [f"/{i}"],
                               "kwargs": {"width": 100 + i}}).json()["id"] for i in range(9)]
    app.cancel_job(ids[0])
    monkeypatch.setattr(search, "SCAN", 2)
    path: str | None = API + "/jobs?arg=width%3D100&limit=5"
    pages: list[dict[str, Any]] = []
    while path is not None:
        page = api.get(path, headers=auth()).json()
        pages.append(page)
        path = page["next"]
        assert (path is None) == (page["next_before_id"] is None)
        window = page["scanned"]
        assert window["to_id"] - window["from_id"] < 2  # each request stays bounded
    assert [j["id"] for p in pages for j in p["jobs"]] == [ids[0]]
    assert pages[0]["jobs"] == [] and pages[0]["next_before_id"] == pages[0]["scanned"]["from_id"]
    assert len(pages) == 5  # 9 ids of resize, 2 per window (the oldest: the 5th window)
    plain = get(api, "/jobs?task=resize&limit=3").json()
    assert plain["scanned"] is None and plain["next_before_id"] == ids[6]
    refused(get(api, "/jobs?arg=width"), 400, "bad_parameter", "arg")
    refused(get(api, "/jobs?arg=width%3D%5B1%5D"), 400, "bad_parameter", "arg")


@pytest.mark.parametrize("query", [
    "state=exploded", "limit=0", "limit=501", "limit=ten", "before_id=-3", "before_id=x",
    "queue=bad%20name", "task=9lives%20x", "tag=" + "t" * 300, "colour=red",
])
def test_bad_query_parameters_are_400_naming_them(api: Any, query: str) -> None:
    name = query.split("=")[0]
    refused(get(api, f"/jobs?{query}"), 400, "bad_parameter", name)


# -- waiting, cancel, retry -------------------------------------------------------------------

def test_wait_answers_a_final_job_at_once_and_408_when_not_final(api: Any, world: Any) -> None:
    job = post(api, "/jobs", {"task": "resize", "args": ["/a"]}).json()
    body = refused(get(api, f"/jobs/{job['id']}/wait?timeout=0.3"), 408, "timeout")
    assert body["job"]["state"] == "available"
    world[0].cancel_job(job["id"])
    done = get(api, f"/jobs/{job['id']}/wait?timeout=5")
    assert done.status_code == 200 and done.json()["state"] == "cancelled"
    refused(get(api, "/jobs/424242/wait?timeout=1"), 404, "not_found")
    for bad in ("61", "-1", "soon", "nan", "inf"):
        refused(get(api, f"/jobs/{job['id']}/wait?timeout={bad}"), 400, "bad_parameter",
                "timeout")


def test_cancel_and_retry_record_the_http_api_as_source(api: Any, world: Any) -> None:
    _, seen = world
    job = post(api, "/jobs", {"task": "resize", "args": ["/a"]}).json()
    seen.clear()
    cancelled = post(api, f"/jobs/{job['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    body = refused(post(api, f"/jobs/{job['id']}/cancel"), 409, "invalid_state")
    assert body["state"] == "cancelled" and "cannot be cancelled" in body["message"]
    retried = post(api, f"/jobs/{job['id']}/retry")
    assert retried.status_code == 200 and retried.json()["state"] == "available"
    refused(post(api, f"/jobs/{job['id']}/retry"), 409, "invalid_state")
    assert {c.source for c in seen} == {"http"}
    assert [c.state for c in seen] == [JobState.CANCELLED, JobState.AVAILABLE]
    for action in ("cancel", "retry"):
        refused(post(api, f"/jobs/31337/{action}"), 404, "not_found")
        refused(post(api, f"/jobs/x/{action}"), 400, "bad_parameter", "job_id")


# -- queues -----------------------------------------------------------------------------------

def test_queues_list_pause_and_resume(api: Any, world: Any) -> None:
    post(api, "/jobs", {"task": "send_email", "args": ["a", "b"]})
    queues = {q["name"]: q for q in get(api, "/queues").json()}
    assert queues["mail"]["counts"]["available"] == 1 and queues["mail"]["paused"] is False
    assert post(api, "/queues/mail/pause").json() == {"name": "mail", "paused": True}
    assert {q["name"]: q for q in get(api, "/queues").json()}["mail"]["paused"] is True
    assert world[0].list_queues()[0].paused is True
    assert post(api, "/queues/mail/resume").json() == {"name": "mail", "paused": False}
    assert {q["name"]: q for q in get(api, "/queues").json()}["mail"]["paused"] is False
    refused(post(api, "/queues/bad%20name/pause"), 400, "bad_parameter", "name")
    refused(post(api, "/queues/mail/drain"), 404, "not_found")
    refused(api.get(API + "/queues/mail/pause", headers=auth()), 405, "method_not_allowed")


@pytest.mark.parametrize(("raw", "status", "field"), [
    (b'{"task": "resize", "args": [NaN]}', 422, "args"),  # not storable JSON
    (b'{"task": "resize", "args": ["\\ud800"]}', 422, "args"),  # a lone surrogate
    (b'{"task": "resize", "args": ' + b"[" * 5000 + b"]" * 5000 + b"}", 400, None),
    (b'{"task": "resize", "args": [1' + b"0" * 5000 + b"]}", 400, None),
])
def test_json_that_cannot_be_stored_is_refused_cleanly(api: Any, world: Any, raw: bytes,
                                                       status: int, field: str | None) -> None:
    response = api.post(API + "/jobs", content=raw, headers={
        **auth(), "content-type": "application/json"})
    refused(response, status, "invalid" if status == 422 else "bad_json", field)
    assert count(world[0]) == 0
