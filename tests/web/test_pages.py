"""Every page and action of the dashboard over HTTP (no browser), on both backends:
what each page shows, filters, keyset pages, actions and their effect in the database."""

from __future__ import annotations

import re

import pytest

from conveyor import Conveyor, JobState, StateChange

from .conftest import Browser, browser_for


def ids_on(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'<tr data-job="(\d+)"', html)]


def test_every_page_renders(browser: Browser, world: Conveyor) -> None:
    pages = {
        "/": ["Overview", "Throughput per minute", "<svg", "billing", "discarded"],
        "/queues": ["Queues", 'data-queue="mail"', "Pause"],
        "/jobs": ["Jobs", "matching", "send_email"],
        "/jobs/1": ["Job 1", "Timeline", "enqueued"],
        "/failures": ["Failures", "ValueError: card declined", "ConnectionError"],
        "/schedules": ["nightly-report", "0 3 * * *", "Run now"],
        "/workers": ["Workers"],
        "/bulk?action=retry&state=failed": ["Retry", "job(s)?"],
    }
    for path, expected in pages.items():
        response = browser.get(path)
        assert response.status_code == 200, path
        for text in expected:
            assert text in response.text, (path, text)
        assert "csp" not in response.text.lower()
        assert response.headers["content-security-policy"].startswith("default-src 'none'")
    assert browser.get("/jobs/999999").status_code == 404
    assert browser.get("/jobs/abc").status_code == 404
    assert browser.get("/static/app.js").headers["content-type"].startswith("text/javascript")


def test_live_refresh_returns_only_the_live_part(browser: Browser) -> None:
    full = browser.get("/queues").text
    part = browser.get("/queues", headers={"x-conveyor-live": "1"}).text
    assert full.lstrip().startswith("<!doctype html>") and 'id="live" data-poll="2.0"' in full
    assert "<html" not in part and "<h1>Queues</h1>" in part


def test_job_filters_and_keyset_pages(browser: Browser, world: Conveyor) -> None:
    discarded = browser.get("/jobs?state=discarded").text
    shown = [world.get_job(i) for i in ids_on(discarded)]
    # the declined and the negative charges, and nothing else (no resize job)
    assert "7 matching" in discarded and len(shown) == 7
    assert {(j.task, j.state) for j in shown if j is not None} == {("charge", JobState.DISCARDED)}
    assert ids_on(browser.get("/jobs?task=send_email").text) == [45, 44, 43]
    assert ids_on(browser.get("/jobs?q=grace@").text) == [44]
    assert ids_on(browser.get("/jobs?state=failed&task=sync_ledger").text) == [42, 41, 40, 39]
    first = browser.get("/jobs?limit=25").text
    assert ids_on(first) == list(range(46, 21, -1)) and "47 matching" not in first
    older = re.search(r'href="(/jobs\?[^"]*before=22[^"]*)"', first)
    assert older, "an Older link with the last id as cursor"
    second = browser.get(older.group(1).replace("&amp;", "&")).text
    assert ids_on(second) == list(range(21, 0, -1))
    newer = re.search(r'href="(/jobs\?[^"]*after=21[^"]*)"', second)
    assert newer and ids_on(browser.get(newer.group(1).replace("&amp;", "&")).text) == \
        list(range(46, 21, -1))
    for capped in browser_for(world, count_cap=3):
        assert "3+ matching" in capped.get("/jobs?task=resize").text
        assert "3 matching" in capped.get("/jobs?task=send_email").text


def test_job_actions_change_the_database(browser: Browser, world: Conveyor) -> None:
    changes: list[StateChange] = []
    world.on_state_change(changes.append)
    response = browser.post("/jobs/31/retry")
    assert response.status_code == 303 and response.headers["location"] == "/jobs/31"
    assert world.get_job(31).state == JobState.AVAILABLE  # type: ignore[union-attr]
    assert "is back in its queue" in browser.get("/jobs/31").text  # the flash message
    assert browser.post("/jobs/45/cancel").status_code == 303
    assert world.get_job(45).state == JobState.CANCELLED  # type: ignore[union-attr]
    assert browser.post("/jobs/44/discard").status_code == 303
    job = world.get_job(44)
    assert job is not None and job.state == JobState.DISCARDED
    assert job.errors[-1]["error"] == "discarded by an operator"
    # Not allowed in its state: nothing changes, the page says why.
    browser.post("/jobs/1/discard")
    assert "Job 1 is completed and cannot be discarded" in browser.get("/jobs/1").text
    assert [(c.job_id, c.previous, c.state, c.source) for c in changes] == [
        (31, JobState.DISCARDED, JobState.AVAILABLE, "dashboard"),
        (45, JobState.SCHEDULED, JobState.CANCELLED, "dashboard"),
        (44, JobState.AVAILABLE, JobState.DISCARDED, "dashboard")]


def test_bulk_actions_apply_to_everything_matching_up_to_the_cap(world: Conveyor) -> None:
    for b in browser_for(world, bulk_cap=4):
        page = b.get("/bulk?action=retry&state=failed&task=charge&back=/failures").text
        assert "More than 4 jobs match" in page and "Retry 4+ job(s)?" in page
        form = {"action": "retry", "state": "failed", "task": "charge", "back": "/failures"}
        response = b.post("/bulk", form)
        assert response.status_code == 303 and response.headers["location"] == "/failures"
        charge = world.list_jobs(task="charge", limit=100)
        assert sum(j.state == JobState.AVAILABLE for j in charge) == 4
        assert "4 job(s) retried" in b.get("/failures").text
        group = {"action": "discard", "state": "failed", "task": "sync_ledger",
                 "error": "ConnectionError: ledger API unreachable: connection reset by peer"}
        assert b.post("/bulk", group).status_code == 303
        assert {j.state for j in world.list_jobs(task="sync_ledger")} == {JobState.DISCARDED}
        # The redirect target is always one of ours.
        evil = b.post("/bulk", {**form, "back": "//evil.example/x"})
        assert evil.headers["location"] == "/"


def test_queue_and_schedule_controls(browser: Browser, world: Conveyor) -> None:
    assert browser.post("/queues/mail/pause").status_code == 303
    assert [q.paused for q in world.list_queues() if q.name == "mail"] == [True]
    assert "paused" in browser.get("/queues").text
    browser.post("/queues/mail/concurrency", {"concurrency": "3", "scope": "per_node"})
    mail = next(q for q in world.list_queues() if q.name == "mail")
    assert (mail.concurrency, mail.scope) == (3, "per_node")
    browser.post("/queues/mail/concurrency", {"concurrency": "zero"})
    assert "whole number" in browser.get("/queues").text
    browser.post("/queues/mail/resume")
    assert [q.paused for q in world.list_queues() if q.name == "mail"] == [False]
    browser.post("/schedules/nightly-report/pause")
    assert [s.row.paused for s in world.list_schedules()] == [True]
    before = len(world.list_jobs(task="nightly_report"))
    assert browser.post("/schedules/nightly-report/trigger").status_code == 303
    assert len(world.list_jobs(task="nightly_report")) == before + 1
    assert browser.post("/schedules/nope/pause").status_code == 303
    assert "no schedule named" in browser.get("/schedules").text


def test_mounted_under_a_prefix(world: Conveyor) -> None:
    import warnings

    from starlette.applications import Starlette
    from starlette.routing import Mount

    from conveyor.web import create_app

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    outer = Starlette(routes=[Mount("/ops/jobs", create_app(world))])
    with TestClient(outer, base_url="http://localhost") as client:
        b = Browser(client)
        first = b.get("/ops/jobs/queues")
        assert "Path=/ops/jobs;" in first.headers["set-cookie"]
        html = first.text
        assert 'href="/ops/jobs/static/app.css"' in html
        assert 'action="/ops/jobs/queues/mail/pause"' in html
        assert b.get("/ops/jobs/static/app.js").status_code == 200
        response = b.post("/ops/jobs/queues/mail/pause", token=b.token("/ops/jobs/queues"))
        assert response.status_code == 303 and response.headers["location"] == "/ops/jobs/queues"
        assert [q.paused for q in world.list_queues() if q.name == "mail"] == [True]


def test_args_search_reads_only_the_newest_jobs(browser: Browser, world: Conveyor,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from conveyor._app.reads import jobs as job_reads

    everything = ids_on(browser.get("/jobs?q=png").text)
    assert len(everything) == 30
    monkeypatch.setattr(job_reads, "TEXT_SCAN", 20)
    page = browser.get("/jobs?q=png").text
    newest = max(j.id for j in world.list_jobs(limit=1))
    assert ids_on(page) == [i for i in everything if i > newest - 20]
    assert f"searched jobs #{newest - 19} to #{newest}" in page


def test_search_older_goes_on_window_after_window(browser: Browser, world: Conveyor,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 31: the search box reads one window of ids per page, says which, and its
    "Search older" link goes on below it until the oldest match is found."""
    from conveyor._app.reads import jobs as job_reads

    charge = world.task(name="lookup")(lambda **kw: None)
    old = charge.options(delay=3600).enqueue(order_id=777).id
    filler = [charge.options(delay=3600).enqueue(order_id=i).id for i in range(12)]
    monkeypatch.setattr(job_reads, "TEXT_SCAN", 5)
    path = "/jobs?arg=order_id%3D777&state=scheduled"
    windows = []
    while True:
        page = browser.get(path)
        assert page.status_code == 200
        shown = re.search(r"searched jobs #(\d+) to #(\d+)", page.text)
        assert shown, page.text[:500]
        low, high = int(shown.group(1)), int(shown.group(2))
        assert high - low < 5
        windows.append((low, high))
        if ids_on(page.text):
            break
        link = re.search(r'id="search-older" href="([^"]+)"', page.text)
        assert link, "an empty window offers to search older"
        path = link.group(1).replace("&amp;", "&")
        assert f"before={low}" in path
    assert ids_on(page.text) == [old]
    assert windows[0] == (filler[-1] - 4, filler[-1]) and len(windows) == 3
    # the match's window ends the search only where no older job is left
    assert ('id="search-older"' in page.text) == (low > 1)
    # a bulk action from that page acts on the window the page searched
    bulk = re.search(r'href="(/bulk\?[^"]*action=discard[^"]*)"', page.text)
    assert bulk and f"before={high + 1}" in bulk.group(1)
    confirm = browser.get(bulk.group(1).replace("&amp;", "&")).text
    assert "Discard 1 job(s)?" in confirm and f'name="before" value="{high + 1}"' in confirm
    newest = browser.get("/bulk?action=discard&state=scheduled&arg=order_id%3D777").text
    assert "Discard 0 job(s)?" in newest
    form = {"action": "discard", "state": "scheduled", "arg": "order_id=777",
            "before": str(high + 1), "back": "/jobs"}
    assert browser.post("/bulk", form, token=browser.token(path)).status_code == 303
    discarded = world.get_job(old)
    assert discarded is not None and discarded.state is JobState.DISCARDED
