"""A completed job's progress is done (issue 28 defect 13): a handler that last reported
80% and returned showed a bar stuck at 80% on the dashboard and in ``jobs show``."""

from __future__ import annotations

import re

from conveyor import Conveyor, JobState, current_job

from ..test_cli import invoke
from .conftest import browser_for


def test_a_completed_job_shows_a_full_bar(app: Conveyor, db_url: str) -> None:
    @app.task
    def almost(stop: bool) -> None:
        current_job().set_progress(0.8, "writing the report")
        if stop:
            raise RuntimeError("disk full")

    done = almost.enqueue(False)
    failed = almost.options(max_attempts=1).enqueue(True)
    app.drain()
    assert app.get_job(done.id).state is JobState.COMPLETED  # type: ignore[union-attr]
    assert app.get_job(failed.id).progress == 0.8  # type: ignore[union-attr]

    for browser in browser_for(app):
        page = browser.get(f"/jobs/{done.id}").text
        bar = re.search(r'id="job-progress">(.*?)</dd>', page, re.DOTALL)
        assert bar is not None, page
        assert 'data-progress="1.0"' in bar.group(1) and "100%" in bar.group(1), bar.group(1)
        assert "80%" not in bar.group(1)
        listed = browser.get("/jobs").text
        row = re.search(rf'<tr[^>]*data-job="{done.id}".*?</tr>', listed, re.DOTALL)
        assert row is not None and "100%" in row.group(0) and "80%" not in row.group(0)
        # A job that did not complete shows what it reported.
        page = browser.get(f"/jobs/{failed.id}").text
        assert 'data-progress="0.8"' in page and "80%" in page

    shown = invoke("jobs", "show", str(done.id), "--url", db_url).stdout
    assert "100%" in shown and "80%" not in shown, shown
