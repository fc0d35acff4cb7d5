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
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, Discard, JobState, chain, current_job, group
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


def open_page(chromium: Any) -> tuple[Any, Any, list[str]]:
    """A new browser context and page at the suite's size and timeout, accepting confirm
    dialogs; the list collects script errors and CSP violations (tests require it empty)."""
    context = chromium.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.on("dialog", lambda dialog: dialog.accept())
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    return context, page, errors


@pytest.fixture
def session(chromium: Any, db_url: str, tmp_path: Path) -> Iterator[tuple[Any, str, Conveyor, Shots]]:
    # Playwright's sync API keeps an event loop running on this thread: seed on another.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        app = pool.submit(build_world, db_url).result()
    try:
        with live_worker(app, queues={"default": 4}):
            app.tasks["slow_export"].enqueue("customers.csv")
            with serve(create_app(app, poll_interval=0.5)) as base:
                context, page, errors = open_page(chromium)
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
    page.click(".actions button:has-text('Retry')")
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


def test_a_progress_bar_moves_while_a_real_worker_runs_the_job(
        chromium: Any, db_url: str, wait_for: WaitFor) -> None:
    """A handler on a real worker advances its progress one step each time the test lets
    it; the job page's bar (and the jobs list's) follows through the live refresh,
    without a reload, and shows 100% once the job completed."""
    app = Conveyor(db_url)
    steps = [threading.Event() for _ in range(4)]

    @app.task(name="progress_steps")
    def progress_steps() -> None:
        for i, step in enumerate(steps):
            current_job().set_progress(i / 4, f"step {i} of 4")
            assert step.wait(30)
        current_job().set_progress(1.0, "done")

    def bar(page: Any, value: str) -> None:
        page.wait_for_selector(f"#job-progress .job-progress[data-progress='{value}'] progress")

    try:
        with live_worker(app, queues={"default": 2}), \
                serve(create_app(app, poll_interval=0.5)) as base:
            job = progress_steps.enqueue()
            context, page, errors = open_page(chromium)
            wait_for(lambda: state_of(app, job.id) is JobState.RUNNING, timeout=15,
                     message="the job to start")
            page.goto(f"{base}/jobs/{job.id}")
            bar(page, "0.0")
            page.evaluate("window.__sameDocument = true")
            seen = []
            for i, step in enumerate(steps[:3]):
                step.set()
                bar(page, str((i + 1) / 4))
                seen.append(page.locator("#job-progress progress").get_attribute("value"))
                assert f"step {i + 1} of 4" in page.inner_text("#job-progress")
            assert seen == ["0.25", "0.5", "0.75"]
            assert page.evaluate("window.__sameDocument") is True, "moved without a reload"
            page.goto(f"{base}/jobs")
            row = f"tr[data-job='{job.id}'] .job-progress[data-progress='0.75']"
            page.wait_for_selector(row)
            page.goto(f"{base}/jobs/{job.id}")
            steps[3].set()
            bar(page, "1.0")
            page.wait_for_selector("#live .st-completed")
            assert "100%" in page.inner_text("#job-progress")
            context.close()
            assert errors == [], "no script errors and no CSP violations"
    finally:
        for step in steps:
            step.set()
        app.close()


# -- the workflow and batch pages -------------------------------------------------------------

#: The first job of the browser's workflow runs until this is set.
GATE = threading.Event()
#: ``flaky`` discards itself until this is set (then a retry succeeds).
HEAL = threading.Event()


def composition_app(url: str) -> Conveyor:
    app = Conveyor(url)

    @app.task
    def gated(n: int) -> int:
        GATE.wait(30)
        return n

    @app.task
    def step(n: int) -> int:
        return n

    @app.task(max_attempts=1)
    def flaky(n: int) -> int:
        if not HEAL.is_set():
            raise Discard(f"not yet {n}")
        return n

    return app


@pytest.fixture
def composition(chromium: Any, db_url: str) -> Iterator[tuple[Any, str, Conveyor]]:
    GATE.clear()
    HEAL.clear()
    app = composition_app(db_url)
    try:
        with live_worker(app, queues={"default": 4}), \
                serve(create_app(app, poll_interval=0.5)) as base:
            context, page, errors = open_page(chromium)
            try:
                yield page, base, app
            finally:
                GATE.set()
                context.close()
            assert errors == [], "no script errors and no CSP violations"
    finally:
        app.close()


def test_workflow_page_follows_a_running_workflow(composition: tuple[Any, str, Conveyor],
                                                  tmp_path: Path) -> None:
    page, base, app = composition
    t = app.tasks
    run = app.enqueue_workflow(chain(t["gated"].job(1), group(t["step"].job(2), t["step"].job(3)),
                                     t["step"].job(4)))
    first, *rest = (j.id for j in run.jobs)
    page.goto(f"{base}/workflows/{run.id}")
    page.evaluate("window.__sameDocument = true")
    # The worker picks the first job up: its box turns running without a reload.
    page.wait_for_selector(f"g.node.st-running[data-job='{first}']")
    assert page.locator("g.node.st-pending").count() == 3
    assert page.locator("svg.workflow path.edge").count() == 4
    page.screenshot(path=str(tmp_path / "workflow.png"), full_page=True)
    GATE.set()
    for job_id in rest:
        page.wait_for_selector(f"g.node.st-completed[data-job='{job_id}']")
    page.wait_for_selector("#workflow-status:has-text('completed')")
    assert page.evaluate("window.__sameDocument") is True
    assert {state_of(app, j.id) for j in run.jobs} == {JobState.COMPLETED}
    # A box links to its job's page, which links back to the workflow.
    page.click(f"g.node[data-job='{rest[-1]}']")
    page.wait_for_selector("text=Timeline")
    page.click("#job-workflow")
    page.wait_for_url(f"**/workflows/{run.id}")


def test_retry_a_discarded_job_from_its_batch_page(composition: tuple[Any, str, Conveyor],
                                                   wait_for: WaitFor) -> None:
    page, base, app = composition
    t = app.tasks
    batch = app.batch([t["step"].job(1), t["flaky"].job(2)], on_complete=t["step"].job(0))
    failed = batch.jobs[1].id
    wait_for(lambda: state_of(app, failed) == JobState.DISCARDED, timeout=20,
             message="the flaky job to be discarded")
    page.goto(f"{base}/batches/{batch.id}")
    page.wait_for_selector(f"tr[data-job='{failed}'][data-state='discarded']")
    HEAL.set()
    page.click(f"tr[data-job='{failed}'] button:has-text('Retry')")
    page.wait_for_selector("text=is back in its queue")
    assert page.url.endswith(f"/batches/{batch.id}")
    # The worker runs it again, and the page shows it completed without a reload.
    page.wait_for_selector(f"tr[data-job='{failed}'][data-state='completed']")
    found = app.get_batch(batch.id)
    assert found is not None and (found.completed, found.discarded) == (2, 0)
    assert page.locator("[data-count='completed'] .value").inner_text() == "2"


def test_limiters_and_their_holders_live(session: tuple[Any, str, Conveyor, Shots]) -> None:
    page, base, app, _ = session
    ocr = app.limiter("ocr", concurrency=2)
    # Playwright's sync API runs an event loop on this thread, where a limiter's sync
    # form refuses to block: take and give back the slot from another thread.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        permit = pool.submit(lambda: ocr.acquire(key="acme")).result()
        page.goto(base + "/limiters")
        page.wait_for_selector(f"tr[data-holder='{permit.holder}']")
        assert "1 of 2 per key" in page.locator("tr[data-limiter='ocr']").inner_text()
        pool.submit(permit.release).result()  # the page's live refresh drops the holder
    page.wait_for_selector(f"tr[data-holder='{permit.holder}']", state="detached")
    page.wait_for_selector("text=Nobody holds a concurrency slot now.")
