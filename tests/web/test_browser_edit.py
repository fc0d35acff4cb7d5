"""Edit and retry in a real browser (Debian's chromium through Playwright) against a real
server: a bad edit shows its error in place with the text as typed, a good one retries
the job with the new arguments and the timeline names the dashboard user."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from conveyor import Conveyor, Job
from conveyor.web import BasicAuth, create_app

from ._server import serve
from .test_browser import chromium as chromium  # the module's browser fixture

pytestmark = pytest.mark.browser
PASSWORD = "s3cret-pass-long-enough"
T = TypeVar("T")


@pytest.fixture
def off_thread() -> Iterator[Callable[[Callable[[], T]], T]]:
    """Run database calls on another thread: Playwright's sync API keeps an event loop
    running on this one."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        yield lambda fn: pool.submit(fn).result()


def test_edit_and_retry_from_the_job_page(chromium: Any, db_url: str,
                                          off_thread: Callable[[Callable[[], Any]], Any]) -> None:
    app = Conveyor(db_url)

    @app.task(name="send")
    def send(to: str, subject: str = "") -> None: ...

    def failed() -> Job:
        job = send.enqueue("bad@", subject="hi")
        return app.cancel_job(job.id)

    job = off_thread(failed)
    try:
        with serve(create_app(app, auth=BasicAuth("ops", PASSWORD), poll_interval=0)) as base:
            context = chromium.new_context(http_credentials={"username": "ops",
                                                             "password": PASSWORD})
            page = context.new_page()
            page.set_default_timeout(15_000)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(f"{base}/jobs/{job.id}")
            page.click("#edit-retry summary")
            assert page.input_value("#edit-args") == '["bad@"]'

            page.fill("#edit-args", '["ok@example.com", ')
            page.click("#edit-retry-form button[type=submit]")
            page.wait_for_selector("#edit-retry-error")
            assert "Args is not JSON" in page.inner_text("#edit-retry-error")
            assert page.input_value("#edit-args") == '["ok@example.com",'
            assert off_thread(lambda: app.get_job(job.id)) == job, "nothing changed"

            page.fill("#edit-args", '["ok@example.com"]')
            page.fill("#edit-kwargs", '{"subject": "fixed"}')
            page.click("#edit-retry-form button[type=submit]")
            page.wait_for_selector(f"text=Job {job.id} is back in its queue.")
            assert "asked by dashboard (user ops)" in page.inner_text(".timeline")
            context.close()
            # the refused edit's page came back 422, as it should; nothing else went wrong
            assert [e for e in errors if "status of 422" not in e] == []
        edited = off_thread(lambda: app.get_job(job.id))
        assert (edited.state.value, edited.args, edited.kwargs) == (
            "available", ["ok@example.com"], {"subject": "fixed"})
        (edit,) = off_thread(lambda: app.job_edits(job.id))
        assert (edit.source, edit.actor, edit.args_before) == ("dashboard", "ops", ["bad@"])
    finally:
        off_thread(app.close)
