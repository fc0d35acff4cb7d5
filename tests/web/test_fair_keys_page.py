"""The dashboard's fair keys: the queue page lists a queue's keys with their waiting
jobs (most first, weights marked), the job page shows a job's fair key; both backends."""

from __future__ import annotations

import re
import warnings

from conveyor import Conveyor

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from conveyor.web import create_app


def test_the_queue_page_lists_fair_keys_and_the_job_page_shows_its_key(app: Conveyor) -> None:
    @app.task(queue="reports", fair_key=lambda tenant, *_: tenant)
    def report(tenant: str, n: int) -> None: ...

    @app.task(queue="plain")
    def other(n: int) -> None: ...

    app.enqueue_many([report.job("acme", i) for i in range(7)])
    app.enqueue_many([report.job("globex", i) for i in range(2)])
    keyed = report.options(fair_key="initech").enqueue("x", 1)
    plain = other.enqueue(1)
    app.set_fair_weight("reports", "globex", 3)
    with TestClient(create_app(app), base_url="http://localhost") as client:
        page = client.get("/queues").text
        row = re.search(r'<tr data-queue="reports">.*?</tr>', page, re.S)
        assert row is not None
        cell = re.search(r'<td class="fair-keys">(.*?)</td>', row.group(0), re.S)
        assert cell is not None and ">3 keys</span>" in cell.group(1)
        keys = re.findall(r'data-fair-key="([^"]+)"[^>]*>([^<]+)</code>', cell.group(1))
        assert keys == [("acme", "acme 7"), ("globex", "globex 2 \u00d73"), ("initech", "initech 1")]
        other_row = re.search(r'<tr data-queue="plain">.*?</tr>', page, re.S)
        assert other_row is not None
        assert '<td class="fair-keys">-</td>' in other_row.group(0)

        job_page = client.get(f"/jobs/{keyed.id}").text
        assert re.search(r'id="job-fair-key"><code>initech</code>', job_page)
        assert 'id="job-fair-key"' not in client.get(f"/jobs/{plain.id}").text

        app.drain(queues=["reports"])
        other.options(queue="reports").enqueue(2)  # the row stays: no key waits
        row = re.search(r'<tr data-queue="reports">.*?</tr>', client.get("/queues").text, re.S)
        assert row is not None and '<td class="fair-keys">-</td>' in row.group(0)
