"""The dashboard in a real browser: Debian's chromium driven by Playwright, against a
real server (uvicorn) and a real worker. Each step clicks what an operator would and
then checks the database, not just the page.

Screenshots of the main pages are written to the test's tmp dir; with
``CONVEYOR_UPDATE_SCREENSHOTS=1`` they also replace the ones in docs/images/.
Without /usr/bin/chromium these tests are skipped loudly, and fail when
``CONVEYOR_REQUIRE_BROWSER=1`` (CI).
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, JobState
from conveyor.web import create_app

from ..conftest import WaitFor
from ._seed import add_follower_node, build_world, live_worker
from ._server import CHROMIUM, CHROMIUM_ARGS, ENV_REQUIRE, browser_missing, serve

DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
BROWSER_MISSING = "Browser unavailable:"
pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    reason = browser_missing()
    if reason is not None:
        if os.environ.get(ENV_REQUIRE) == "1":
            pytest.fail(f"{BROWSER_MISSING} {reason}", pytrace=False)
        pytest.skip(f"{BROWSER_MISSING} {reason}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


class Shots:
    def __init__(self, page: Any, folder: Path) -> None:
        self.page, self.folder = page, folder
        self.taken: list[Path] = []

    def __call__(self, name: str, full_page: bool = False) -> None:
        path = self.folder / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=full_page)
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, name
        self.taken.append(path)

    def publish(self) -> None:
        if os.environ.get("CONVEYOR_UPDATE_SCREENSHOTS") == "1":
            DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
            for path in self.taken:
                shutil.copyfile(path, DOCS_IMAGES / f"dashboard-{path.name}")


@pytest.fixture
def session(chromium: Any, db_url: str, tmp_path: Path) -> Iterator[tuple[Any, str, Conveyor, Shots]]:
    # Playwright's sync API keeps an event loop running on this thread: seed on another.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        app = pool.submit(build_world, db_url).result()
    try:
        with live_worker(app, queues={"default": 4}):
            app.tasks["slow_export"].enqueue("customers.csv")
            with serve(create_app(app, poll_interval=0.5)) as base:
                context = chromium.new_context(viewport={"width": 1280, "height": 860})
                page = context.new_page()
                page.set_default_timeout(15_000)
                page.on("dialog", lambda dialog: dialog.accept())
                errors: list[str] = []
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                shots = Shots(page, tmp_path)
                yield page, base, app, shots
                context.close()
                assert errors == [], "no script errors and no CSP violations"
                if db_url.startswith("sqlite"):
                    shots.publish()
    finally:
        app.close()


def state_of(app: Conveyor, job_id: int) -> JobState:
    job = app.get_job(job_id)
    assert job is not None
    return job.state


def test_operator_flows(session: tuple[Any, str, Conveyor, Shots]) -> None:
    page, base, app, shot = session
    page.goto(base + "/")
    page.wait_for_selector(".card.st-running >> text=1")
    assert page.locator("svg.chart").count() == 4
    shot("overview", full_page=True)

    # Jobs: filter, open one, retry it.
    page.goto(base + "/jobs")
    page.select_option("select[name=state]", "discarded")
    page.click("button:has-text('Filter')")
    page.wait_for_url("**/jobs?state=discarded**")
    assert page.locator("tr[data-job]").count() == 7
    page.goto(base + "/jobs")
    shot("jobs")
    charge = next(j for j in app.list_jobs(task="charge", state="discarded")
                  if j.errors[-1]["error"].startswith("ValueError"))
    page.goto(f"{base}/jobs?state=discarded")
    page.click(f"tr[data-job='{charge.id}'] >> a >> nth=0")
    page.wait_for_selector("text=Timeline")
    shot("job", full_page=True)
    page.click("button:has-text('Retry')")
    page.wait_for_selector("text=is back in its queue")
    assert state_of(app, charge.id) == JobState.AVAILABLE

    # Cancel a scheduled job (the form asks for confirmation first).
    later = next(j for j in app.list_jobs(task="send_email") if j.state == JobState.SCHEDULED)
    page.goto(f"{base}/jobs/{later.id}")
    page.click("button:has-text('Cancel')")
    page.wait_for_selector("text=Cancel of job")
    assert state_of(app, later.id) == JobState.CANCELLED


def test_queue_controls_and_bulk_retry(session: tuple[Any, str, Conveyor, Shots]) -> None:
    page, base, app, shot = session
    page.goto(base + "/queues")
    page.click("tr[data-queue='mail'] button:has-text('Pause')")
    page.wait_for_selector("text=Queue mail paused.")
    assert [q.paused for q in app.list_queues() if q.name == "mail"] == [True]
    page.fill("tr[data-queue='billing'] input[name=concurrency]", "3")
    page.click("tr[data-queue='billing'] button:has-text('Set')")
    page.wait_for_selector("text=Concurrency of queue billing changed.")
    assert [q.concurrency for q in app.list_queues() if q.name == "billing"] == [3]
    shot("queues")

    page.goto(base + "/failures")
    shot("failures")
    page.click("tr[data-task='sync_ledger'] a:has-text('Retry all')")
    page.wait_for_selector("#confirm-bulk")
    assert "Retry 4 job(s)?" in page.inner_text("h1")
    page.click("#confirm-bulk")
    page.wait_for_selector("text=4 job(s) retried.")
    assert {j.state for j in app.list_jobs(task="sync_ledger")} == {JobState.AVAILABLE}


def test_schedules_workers_and_live_updates(session: tuple[Any, str, Conveyor, Shots], db_url: str,
                                           wait_for: WaitFor) -> None:
    page, base, app, shot = session
    page.goto(base + "/schedules")
    shot("schedules")
    page.click("tr[data-schedule='nightly-report'] button:has-text('Pause')")
    page.wait_for_selector("text=Schedule nightly-report paused.")
    assert [s.row.paused for s in app.list_schedules()] == [True]

    # The leader badge on the leader's row and on no other: the page's note says "leader"
    # whatever the rows show.
    leader = wait_for(app.get_leader, timeout=20, message="a leader to be elected")
    assert leader is not None
    page.goto(base + "/workers")
    page.wait_for_selector(f"tr[data-node='{leader.node_id}'] .badge.leader")
    shot("workers")
    # A second live node (after the screenshot, which shows the one real worker) is not.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        follower = pool.submit(add_follower_node, db_url).result()
    page.goto(base + "/workers")
    page.wait_for_selector(f"tr[data-node='{follower}']")
    assert page.locator(f"tr[data-node='{leader.node_id}'] .badge.leader").count() == 1
    assert page.locator("tr[data-node] .badge.leader").count() == 1
    assert page.locator(f"tr[data-node='{follower}'] .badge.leader").count() == 0

    # A job enqueued elsewhere shows up without a reload.
    page.goto(base + "/jobs?task=send_email")
    page.evaluate("window.__sameDocument = true")
    job = app.tasks["send_email"].enqueue("new@example.com", subject="hello")
    page.wait_for_selector(f"tr[data-job='{job.id}']")
    assert page.evaluate("window.__sameDocument") is True

    # A hidden tab stops polling; showing it again refreshes at once.
    live: list[str] = []
    page.on("request", lambda r: live.append(r.url) if r.headers.get("x-conveyor-live") else None)
    page.evaluate("""() => {
        Object.defineProperty(document, 'hidden', {configurable: true, get: () => true});
        document.dispatchEvent(new Event('visibilitychange'));
    }""")
    page.wait_for_timeout(600)  # let a request already in flight finish
    seen = len(live)
    page.wait_for_timeout(2_000)  # four poll intervals while hidden
    assert len(live) == seen, "no refresh while the tab is hidden"
    with page.expect_request(lambda r: bool(r.headers.get("x-conveyor-live"))):
        page.evaluate("""() => {
            Object.defineProperty(document, 'hidden', {configurable: true, get: () => false});
            document.dispatchEvent(new Event('visibilitychange'));
        }""")
