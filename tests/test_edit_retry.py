"""Edit and retry: ``app.retry_job(id, args=..., kwargs=...)``, ``conveyor jobs retry ID
--args/--kwargs`` and the dashboard's form, on both backends. The new arguments are
checked as an enqueue of the task checks them, before anything changes; the edit is kept
with the arguments it replaced and who asked, and shows in the job's timeline."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, InvalidStateError, Job, JobState, PayloadTooLargeError
from conveyor._app.operations import Operations
from conveyor._app.reads import jobs as reads
from conveyor.web import BasicAuth

from .conftest import wait_for
from .test_results import worker_thread
from .web.conftest import browser_for

CONVEYOR = Path(sys.executable).parent / "conveyor"
APP_MODULE = '''
from conveyor import Conveyor

app = Conveyor()

@app.task(name="send")
def send(to: str, subject: str = "") -> str:
    return f"{to}: {subject}"
'''


def define(app: Conveyor) -> Any:
    ran: list[tuple[str, str]] = []

    @app.task(name="send")
    def send(to: str, subject: str = "") -> str:
        ran.append((to, subject))
        return f"{to}: {subject}"

    send.ran = ran  # type: ignore[attr-defined]
    return send


def failed_job(app: Conveyor, to: str = "bad@", subject: str = "hi") -> Job:
    send = app.tasks["send"]
    job = send.enqueue(to, subject=subject)
    return app.cancel_job(job.id)  # final, as a discarded job would be


def current(app: Conveyor, job_id: int) -> Job:
    job = app.get_job(job_id)
    assert job is not None
    return job


def test_an_edit_runs_the_job_with_the_new_arguments_and_is_recorded(app: Conveyor) -> None:
    send = define(app)
    job = failed_job(app)
    retried = app.retry_job(job.id, args=["ok@example.com"], user="alice")
    assert (retried.state, retried.args, retried.kwargs) == (
        JobState.AVAILABLE, ["ok@example.com"], {"subject": "hi"})
    (edit,) = app.job_edits(job.id)
    assert (edit.source, edit.actor) == ("api", "alice")
    assert (edit.args_before, edit.kwargs_before) == (["bad@"], {"subject": "hi"})
    assert (edit.args, edit.kwargs) == (["ok@example.com"], {"subject": "hi"})
    with worker_thread(app):
        wait_for(lambda: current(app, job.id).state == JobState.COMPLETED, timeout=30,
                 message="a worker to run the edited job")
    assert send.ran == [("ok@example.com", "hi")]
    assert current(app, job.id).result == "ok@example.com: hi"


def test_kwargs_alone_keep_the_args(app: Conveyor) -> None:
    define(app)
    job = failed_job(app)
    retried = app.retry_job(job.id, kwargs={"subject": "again"})
    assert (retried.args, retried.kwargs) == (["bad@"], {"subject": "again"})


@pytest.mark.parametrize(("args", "kwargs", "error", "match"), [
    (["a", "b", "c"], None, TypeError, "do not fit task 'send'"),
    (None, {"nope": 1}, TypeError, "unexpected keyword argument 'nope'"),
    ("a@b.c", None, TypeError, "args must be a list"),
    (None, ["x"], TypeError, "kwargs must be a dict"),
    (None, {1: "x"}, TypeError, "kwargs keys must be strings"),
    (["x" * 2_000_000], None, PayloadTooLargeError, "over the cap"),
    ([object()], None, TypeError, "object"),
], ids=["extra-positional", "unknown-keyword", "args-str", "kwargs-list", "kwargs-keys",
        "oversized", "not-json"])
def test_arguments_that_do_not_fit_change_nothing(
        app: Conveyor, args: Any, kwargs: Any, error: type[Exception], match: str) -> None:
    define(app)
    job = failed_job(app)
    with pytest.raises(error, match=match):
        app.retry_job(job.id, args=args, kwargs=kwargs)
    assert current(app, job.id) == job
    assert app.job_edits(job.id) == []


def test_a_job_retry_would_refuse_is_refused_the_same(app: Conveyor) -> None:
    define(app)
    waiting = app.tasks["send"].enqueue("a@b.c")
    with pytest.raises(InvalidStateError):
        app.retry_job(waiting.id, args=["other@b.c"])
    assert current(app, waiting.id).args == ["a@b.c"]
    assert app.job_edits(waiting.id) == []
    with pytest.raises(ValueError, match="user must be"):
        app.retry_job(waiting.id, args=["x"], user="")


def test_a_task_this_app_does_not_know_takes_any_json(db_url: str) -> None:
    producer = Conveyor(db_url)
    operator = Conveyor(db_url)  # defines no task: `conveyor jobs retry` without --app
    try:
        define(producer)
        job = failed_job(producer)
        retried = operator.retry_job(job.id, args=[1, 2, 3], kwargs={"x": {"y": None}})
        assert (retried.args, retried.kwargs) == ([1, 2, 3], {"x": {"y": None}})
    finally:
        producer.close()
        operator.close()


def test_an_archived_job_is_edited_from_history(db_url: str) -> None:
    app = Conveyor(db_url)
    try:
        define(app)
        job = failed_job(app)
        storage = asyncio.run(_archive(app))
        assert storage == 1, "the job moved to history"
        retried = app.retry_job(job.id, args=["from@history"])
        assert (retried.state, retried.args) == (JobState.AVAILABLE, ["from@history"])
        assert [e.args for e in app.job_edits(job.id)] == [["from@history"]]
    finally:
        app.close()


async def _archive(app: Conveyor) -> int:
    from conveyor._storage import JobArchiveParams

    storage = await app.storage()
    moved = await storage.job_archive(JobArchiveParams(after=0.0, limit=100))
    await app.close_async()
    return moved


def test_the_timeline_shows_the_edit_and_who_asked(app: Conveyor) -> None:
    define(app)
    job = failed_job(app)
    app.retry_job(job.id, kwargs={"subject": "fixed"}, source="dashboard", user="ops")

    async def detail() -> reads.JobDetail | None:
        return await reads.job_detail(Operations(app, source="test"), job.id, lambda j: j)

    shown = asyncio.run(detail())
    assert shown is not None
    (entry,) = [e for e in shown.timeline if e.kind == "edit"]
    assert entry.what == "edited and retried"
    assert entry.detail == "kwargs changed, asked by dashboard (user ops)"
    assert json.loads(shown.edit_args or "") == ["bad@"]


def test_the_pruner_forgets_the_edits_of_deleted_jobs(app: Conveyor) -> None:
    define(app)
    job = failed_job(app)
    app.retry_job(job.id, args=["x@y"])
    kept = failed_job(app, "keep@")
    app.retry_job(kept.id, args=["kept@"])
    app.cancel_job(job.id)
    app.delete_job(job.id)
    app.prune_now()
    assert app.job_edits(job.id) == []
    assert len(app.job_edits(kept.id)) == 1


# -- the CLI ---------------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "edit_app.py").write_text(APP_MODULE)
    return tmp_path


def cli(project: Path, url: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CONVEYOR_URL": url, "PYTHONPATH": f"{project}{os.pathsep}"
           + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([str(CONVEYOR), *argv], env=env, cwd=project, capture_output=True,
                          text=True, timeout=120)


def test_the_cli_edits_and_retries_one_job(app: Conveyor, db_url: str, project: Path) -> None:
    define(app)
    job = failed_job(app)
    done = cli(project, db_url, "jobs", "retry", str(job.id), "--args", '["cli@example.com"]',
               "--app", "edit_app:app", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["args"] == ["cli@example.com"]
    (edit,) = app.job_edits(job.id)
    assert edit.source == "cli" and edit.actor  # the operating-system user


@pytest.mark.parametrize(("argv", "message"), [
    (["--args", "[1,"], "not valid JSON"),
    (["--args", '{"a": 1}'], "must be a JSON array"),
    (["--kwargs", "[1]"], "must be a JSON object"),
    (["--args", '["a", "b", "c"]', "--app", "edit_app:app"], "do not fit task 'send'"),
    (["--args", '["a"]', "--state", "cancelled"], "edit one job"),
], ids=["bad-json", "args-object", "kwargs-array", "signature", "with-filters"])
def test_the_cli_refuses_bad_edits_with_exit_2(app: Conveyor, db_url: str, project: Path,
                                              argv: list[str], message: str) -> None:
    define(app)
    job = failed_job(app)
    done = cli(project, db_url, "jobs", "retry", str(job.id), *argv)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in done.stderr
    assert current(app, job.id) == job


def test_the_cli_names_a_job_that_is_not_there(app: Conveyor, db_url: str, project: Path) -> None:
    done = cli(project, db_url, "jobs", "retry", "987654", "--args", "[]")
    assert done.returncode == 1
    assert "987654" in done.stderr


# -- the dashboard (HTTP; the browser test is in tests/web/test_browser_edit.py) ---------------


@pytest.fixture
def dashboard(app: Conveyor) -> Iterator[Any]:
    yield from browser_for(app, auth=BasicAuth("ops", "s3cret-pass-long-enough"))


AUTH = {"authorization": "Basic b3BzOnMzY3JldC1wYXNzLWxvbmctZW5vdWdo"}  # ops:s3cret-...


def test_the_dashboard_form_edits_and_records_its_user(app: Conveyor, dashboard: Any) -> None:
    define(app)
    job = failed_job(app)
    page = dashboard.get(f"/jobs/{job.id}", headers=AUTH).text
    assert 'id="edit-retry-form"' in page and "bad@" in page
    response = dashboard.post(f"/jobs/{job.id}/edit", {"args": '["web@example.com"]',
                                                       "kwargs": '{"subject": "hi"}'},
                              token=_token(dashboard, job.id), headers=AUTH)
    assert response.status_code == 303
    assert current(app, job.id).args == ["web@example.com"]
    (edit,) = app.job_edits(job.id)
    assert (edit.source, edit.actor) == ("dashboard", "ops")
    assert "asked by dashboard (user ops)" in dashboard.get(f"/jobs/{job.id}", headers=AUTH).text


def _token(dashboard: Any, job_id: int) -> str:
    import re

    match = re.search(r'name="csrf_token" value="([^"]+)"',
                      dashboard.get(f"/jobs/{job_id}", headers=AUTH).text)
    assert match
    return match.group(1)


@pytest.mark.parametrize(("fields", "message"), [
    ({"args": "[1,", "kwargs": ""}, "Args is not JSON"),
    ({"args": '"x"', "kwargs": ""}, "Args must be an array in JSON"),
    ({"args": "", "kwargs": ""}, "Give the new args"),
    ({"args": '["a", "b", "c"]', "kwargs": ""}, "do not fit task"),
], ids=["bad-json", "not-array", "empty", "signature"])
def test_a_bad_edit_shows_the_error_in_place(app: Conveyor, dashboard: Any,
                                            fields: dict[str, str], message: str) -> None:
    define(app)
    job = failed_job(app)
    response = dashboard.post(f"/jobs/{job.id}/edit", fields, token=_token(dashboard, job.id),
                              headers=AUTH)
    assert response.status_code == 422
    assert 'id="edit-retry-error"' in response.text and message in response.text
    if fields["args"]:  # what was typed is still there to fix
        assert fields["args"].replace('"', "&#34;") in response.text
    assert current(app, job.id) == job


def test_a_read_only_dashboard_has_no_form_and_refuses_the_post(app: Conveyor) -> None:
    define(app)
    job = failed_job(app)
    for b in browser_for(app, read_only=True):
        assert 'id="edit-retry-form"' not in b.get(f"/jobs/{job.id}").text
        response = b.post(f"/jobs/{job.id}/edit", {"args": '["x"]'}, token="no-form-no-token")
        assert response.status_code == 403
    assert current(app, job.id) == job


def test_a_redacted_job_is_not_prefilled(app: Conveyor) -> None:
    define(app)
    job = failed_job(app, "secret@example.com", "password=hunter2")
    def hide(job: Job) -> Job:
        return dataclasses.replace(job, kwargs={"subject": "[redacted]"})

    for b in browser_for(app, redact=hide):
        page = b.get(f"/jobs/{job.id}").text
        assert "hunter2" not in page
        assert "partly redacted" in page


# -- arguments encrypted at rest ---------------------------------------------------------------


def test_an_encrypted_job_is_edited_whole_and_sealed_again(
        app: Conveyor, db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from cryptography.fernet import Fernet

    from conveyor._payload_crypt import sealed_key

    monkeypatch.setenv("CONVEYOR_ENCRYPTION_KEYS", Fernet.generate_key().decode())
    got: list[tuple[str, int]] = []

    @app.task(name="pay", encrypt=True)
    def pay(card: str, amount: int = 0) -> None:
        got.append((card, amount))

    job = app.cancel_job(pay.enqueue("4111-old", amount=5).id)
    with pytest.raises(ValueError, match="encrypted at rest: an edit gives both"):
        app.retry_job(job.id, args=["4111-new"])
    operator = Conveyor(db_url)  # defines no task: it cannot seal them again
    try:
        with pytest.raises(ValueError, match="does not define task 'pay'"):
            operator.retry_job(job.id, args=["4111-new"], kwargs={"amount": 7})
    finally:
        operator.close()
    edited = app.retry_job(job.id, args=["4111-new"], kwargs={"amount": 7})
    assert sealed_key(edited.args, edited.kwargs) is not None, "stored sealed"
    assert "4111-new" not in json.dumps([edited.args, edited.kwargs])
    with worker_thread(app):
        wait_for(lambda: current(app, job.id).state == JobState.COMPLETED, timeout=30,
                 message="a worker to run the edited, sealed job")
    assert got == [("4111-new", 7)]
