"""The workflow page and the batch page over HTTP, on both backends: what they draw and
list, paging, the member actions and their effect in the database, bad ids."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Iterator

import pytest

from conveyor import Conveyor, Discard, JobState, Workflow, chain, group

from .._runtime_util import all_final, run_worker_until
from .conftest import Browser, browser_for

BOX = re.compile(r'<g class="node st-(\w+)" data-job="(\d+)" data-state="\w+">\s*<rect x="(\d+)"')
GROUP = re.compile(r'<g class="node group st-(\w+)" data-state="\w+" data-count="(\d+)">'
                   r'\s*<rect x="(\d+)"')


def make_app(url: str) -> Conveyor:
    app = Conveyor(url)

    @app.task
    def step(n: int) -> int:
        return n

    @app.task(max_attempts=1)
    def refuse(n: int) -> None:
        raise Discard(f"refused {n}")

    return app


@pytest.fixture
def wapp(db_url: str) -> Iterator[Conveyor]:
    app = make_app(db_url)
    try:
        yield app
    finally:
        app.close()


@pytest.fixture
def web(wapp: Conveyor) -> Iterator[Browser]:
    yield from browser_for(wapp)


def boxes(html: str) -> dict[int, tuple[str, int]]:
    """Job id -> (state, x) of each drawn box."""
    return {int(job): (state, int(x)) for state, job, x in BOX.findall(html)}


def run_all(app: Conveyor) -> None:
    asyncio.run(run_worker_until(app, all_final(app)))


def test_workflow_page_draws_jobs_edges_and_states(web: Browser, wapp: Conveyor) -> None:
    step = wapp.tasks["step"]
    run = wapp.enqueue_workflow(chain(step.job(1), group(step.job(2), step.job(3)), step.job(4)))
    first, left, right, last = (j.id for j in run.jobs)
    html = web.get(f"/workflows/{run.id}").text
    drawn = boxes(html)
    assert set(drawn) == {first, left, right, last}
    assert drawn[first] == ("available", drawn[first][1])
    assert {drawn[i][0] for i in (left, right, last)} == {"pending"}
    # Layers left to right by dependency depth; the group shares a column.
    assert drawn[first][1] < drawn[left][1] == drawn[right][1] < drawn[last][1]
    assert html.count('<path class="edge p-cancel"') == 4 and "3 layer(s)" in html
    assert 'id="workflow-status">running' in html and "Cancel workflow" in html
    assert len(re.findall(r'<tr data-job="\d+" data-state="pending"', html)) == 3

    run_all(wapp)
    html = web.get(f"/workflows/{run.id}", headers={"x-conveyor-live": "1"}).text
    assert {state for state, _ in boxes(html).values()} == {"completed"}
    assert 'id="workflow-status">completed' in html and "Cancel workflow" not in html


def test_state_filter_and_pages_of_the_table(web: Browser, wapp: Conveyor) -> None:
    step = wapp.tasks["step"]
    run = wapp.enqueue_workflow(chain(step.job(0), group(*[step.job(i) for i in range(1, 120)])))
    ids = [j.id for j in run.jobs]
    pages = [re.findall(r'<tr data-job="(\d+)"', web.get(f"/workflows/{run.id}?page={p}").text)
             for p in (1, 2, 3)]
    assert [int(i) for page in pages for i in page] == ids  # 50 + 50 + 20, in id order
    assert "page 3 of 3" in web.get(f"/workflows/{run.id}?page=99").text  # clamped
    only = web.get(f"/workflows/{run.id}?state=available").text
    assert re.findall(r'<tr data-job="(\d+)"', only) == [str(ids[0])]
    # An unknown state filter shows every state rather than failing.
    assert web.get(f"/workflows/{run.id}?state=bogus").status_code == 200


def test_a_big_workflow_is_drawn_as_counts_per_state(web: Browser, wapp: Conveyor) -> None:
    step = wapp.tasks["step"]
    wf = Workflow()
    previous = wf.add(step.job(0))
    for i in range(1, 60):  # a chain of 60 layers, each with a fan of 10 beside it
        previous = wf.add(step.job(i), depends_on=[previous])
        for k in range(10):
            wf.add(step.job(k), depends_on=[previous])
    run = wapp.enqueue_workflow(wf)
    assert len(run.jobs) == 650
    html = web.get(f"/workflows/{run.id}").text
    assert boxes(html) == {}, "no box per job past the detail limit"
    groups = GROUP.findall(html)
    assert sum(int(n) for _, n, _ in groups) == 650
    assert {state for state, _, _ in groups} == {"available", "pending"}
    assert len({x for _, _, x in groups}) <= 24 and "61 layer(s)" in html
    assert len(html) < 200_000


def test_member_actions_come_back_to_the_page(web: Browser, wapp: Conveyor) -> None:
    step = wapp.tasks["step"]
    run = wapp.enqueue_workflow(chain(step.job(1), step.job(2), step.job(3)))
    other = wapp.enqueue_workflow(chain(step.job(9)))
    first, middle, last = (j.id for j in run.jobs)
    page = f"/workflows/{run.id}"
    response = web.post(f"{page}/jobs/{middle}/cancel")
    assert response.status_code == 303 and response.headers["location"] == page
    assert "Cancel of job" in web.get(page).text
    # The default policy cascades: the last job is cancelled with its dependency.
    assert [wapp.get_job(i).state for i in (first, middle, last)] == [  # type: ignore[union-attr]
        JobState.AVAILABLE, JobState.CANCELLED, JobState.CANCELLED]
    web.post(f"{page}/jobs/{middle}/cancel")
    assert f"Job {middle} is cancelled and cannot be cancelled" in web.get(page).text
    # A job of another workflow, an unknown action, no CSRF token: refused, nothing changes.
    assert web.post(f"{page}/jobs/{other.jobs[0].id}/cancel").status_code == 404
    assert web.post(f"{page}/jobs/{first}/delete").status_code == 404
    assert web.post(f"{page}/jobs/abc/cancel").status_code == 404
    assert web.post(f"{page}/jobs/{first}/cancel", token="").status_code == 403
    assert web.post(f"{page}/cancel", token="0" * 64).status_code == 403
    assert wapp.get_job(first).state == JobState.AVAILABLE  # type: ignore[union-attr]
    # Retry the cancelled middle job from the page.
    assert web.post(f"{page}/jobs/{middle}/retry").status_code == 303
    assert wapp.get_job(middle).state == JobState.AVAILABLE  # type: ignore[union-attr]


def test_cancel_workflow_cancels_every_job_not_final(web: Browser, wapp: Conveyor) -> None:
    step = wapp.tasks["step"]
    wf = Workflow()
    a = wf.add(step.job(1))
    wf.add(step.job(2), depends_on=[a])
    wf.add(step.job(3), depends_on=[a], on_failure="run")  # not cascaded: cancelled by hand
    run = wapp.enqueue_workflow(wf)
    other = step.enqueue(7)
    response = web.post(f"/workflows/{run.id}/cancel")
    assert response.status_code == 303
    assert {wapp.get_job(j.id).state for j in run.jobs} == {JobState.CANCELLED}  # type: ignore[union-attr]
    assert wapp.get_job(other.id).state == JobState.AVAILABLE  # type: ignore[union-attr]
    assert "job(s) of the workflow cancelled" in web.get(f"/workflows/{run.id}").text
    assert web.post(f"/workflows/{uuid.uuid4()}/cancel").status_code == 404


@pytest.mark.parametrize("path", [
    "/workflows/5c3e8f0a-7b1d-4e2a-9f6c-0d4b8a2e1f37", "/workflows/%27%3Bdrop", "/workflows/" + "x" * 300,
    "/batches/999999", "/batches/abc", "/batches/0", "/batches/-1",
    "/batches/99999999999999999999999"])
def test_unknown_or_malformed_ids_are_404(web: Browser, path: str) -> None:
    response = web.get(path)
    assert response.status_code == 404 and "Internal Server Error" not in response.text


def test_batch_page_counts_callbacks_and_pages(web: Browser, wapp: Conveyor) -> None:
    step = wapp.tasks["step"]
    batch = wapp.batch([step.job(i) for i in range(120)], on_success=step.job(-1),
                       on_complete=step.job(-2), on_discard=step.job(-3))
    html = web.get(f"/batches/{batch.id}").text
    assert 'id="batch-status">running' in html
    counts = dict(re.findall(r'data-count="(\w+)"><span class="label">\w+</span> '
                             r'<span class="value">(\d+)', html))
    assert counts == {"total": "120", "pending": "120", "completed": "0", "discarded": "0",
                      "cancelled": "0"}
    callbacks = dict(re.findall(r'<tr data-callback="(\w+)" data-job="(\d+)"', html))
    assert callbacks == {"on_success": str(batch.on_success),
                         "on_complete": str(batch.on_complete),
                         "on_discard": str(batch.on_discard)}
    seen: list[int] = []
    path = f"/batches/{batch.id}"
    while path:
        page = web.get(path).text
        seen += [int(i) for i in re.findall(r'<tr data-job="(\d+)" data-state', page)]
        found = re.search(r'rel="next" href="([^"]+)"', page)
        path = found.group(1) if found else ""
    assert seen == [j.id for j in batch.jobs]

    run_all(wapp)
    html = web.get(f"/batches/{batch.id}").text
    assert 'id="batch-status">succeeded' in html
    assert re.search(r'data-callback="on_discard".*?st-cancelled', html, re.S)


def test_retry_a_discarded_member_of_a_batch(web: Browser, wapp: Conveyor) -> None:
    step, refuse = wapp.tasks["step"], wapp.tasks["refuse"]
    batch = wapp.batch([step.job(1), refuse.job(2)], on_complete=step.job(0))
    outsider = step.enqueue(5)
    run_all(wapp)
    failed = batch.jobs[1].id
    assert wapp.get_job(failed).state == JobState.DISCARDED  # type: ignore[union-attr]
    page = f"/batches/{batch.id}"
    assert 'id="batch-status">finished' in web.get(page).text
    response = web.post(f"{page}/jobs/{failed}/retry")
    assert response.status_code == 303 and response.headers["location"] == page
    assert wapp.get_job(failed).state == JobState.AVAILABLE  # type: ignore[union-attr]
    found = wapp.get_batch(batch.id)
    assert found is not None and found.discarded == 0 and found.pending == 1
    assert web.post(f"{page}/jobs/{outsider.id}/retry").status_code == 404
    assert web.post(f"/batches/999999/jobs/{failed}/retry").status_code == 404


def test_job_page_links_to_its_workflow_and_batch(web: Browser, wapp: Conveyor) -> None:
    step = wapp.tasks["step"]
    run = wapp.enqueue_workflow(chain(step.job(1), step.job(2)))
    batch = wapp.batch([step.job(3)], on_complete=step.job(4))
    html = web.get(f"/jobs/{run.jobs[1].id}").text
    assert f'href="/workflows/{run.id}"' in html and "waits on 1 job(s)" in html
    assert f'id="job-batch" href="/batches/{batch.id}"' in web.get(f"/jobs/{batch.jobs[0].id}").text
    callback = web.get(f"/jobs/{batch.on_complete}").text
    assert f'id="job-callback-batch" href="/batches/{batch.id}"' in callback
    # The pending state is in the jobs filter and styled like every other state.
    assert '<option value="pending"' in web.get("/jobs").text
    assert ".st-pending.state" in web.get("/static/app.css").text
    # ...and counted in the queue tables (the first number of a queue's row).
    for path in ("/queues", "/"):
        row = re.search(r'<tr data-queue="default">.*?<td class="num">(\d+)</td>',
                        web.get(path).text, re.S)
        assert row is not None and row.group(1) == "2", path  # run.jobs[1] and the callback
    assert '<th class="num">pending</th>' in web.get("/queues").text


def test_pages_refresh_live(web: Browser, wapp: Conveyor) -> None:
    run = wapp.enqueue_workflow(chain(wapp.tasks["step"].job(1)))
    batch = wapp.batch([wapp.tasks["step"].job(2)])
    for path in (f"/workflows/{run.id}", f"/batches/{batch.id}"):
        part = web.get(path, headers={"x-conveyor-live": "1"}).text
        assert "<html" not in part and "<h1>" in part
        assert 'id="live" data-poll=' in web.get(path).text
