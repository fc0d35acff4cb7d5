"""No secret a job carries is shown, wherever it is stored and wherever it is shown.

A secret is the value of a secret-looking key (``password``, ``token``, ``api_key``,
``session``, ...). The world below carries one in each place a job keeps data: its
positional arguments, its keyword arguments, its result, its meta, its batch's meta,
and, echoed by the task's own code, its error and its progress message. Each has a
value of its own, so a failure names the place that leaked. Every page of the
dashboard that shows jobs (lists, details, failures, workflow and batch pages),
``/metrics`` and the CLI (``jobs list``/``show``/``explain``, ``workflows show``,
``batches show``, table and JSON) must show none of them. Both backends.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from conveyor import Conveyor, Job, current_job
from conveyor._workflow import chain
from conveyor.cli import cli

from .conftest import Browser, browser_for

SECRETS = {
    "args": "sk-args-1b7c",
    "kwargs": "sk-kwargs-2d8e",
    "echoed": "sk-echoed-3f9a",
    "result": "sk-result-4a0b",
    "meta": "sk-meta-5c1d",
    "batch meta": "sk-batchmeta-6e2f",
}


class World:
    def __init__(self, app: Conveyor, jobs: dict[str, Job], workflow_id: str,
                 batch_id: int) -> None:
        self.app, self.jobs, self.workflow_id, self.batch_id = app, jobs, workflow_id, batch_id


def _build(db_url: str) -> World:
    app = Conveyor(db_url)

    @app.task(queue="vault", max_attempts=1)
    def login(creds: dict[str, Any], *, api_key: str, secret: str, fail: bool = False,
              ) -> dict[str, str]:
        """Echoes a secret it was given into its progress and its error, as careless
        code does; its result carries a token of its own."""
        current_job().set_progress(0.5, f"signing in with {secret}")
        if fail:
            raise PermissionError(f"refused for {creds['user']}: bad secret {secret}")
        return {"user": creds["user"], "token": SECRETS["result"]}

    def spec(user: str, fail: bool = False) -> Any:
        return login.options(meta={"session": SECRETS["meta"]}).job(
            {"user": user, "password": SECRETS["args"]}, api_key=SECRETS["kwargs"],
            secret=SECRETS["echoed"], fail=fail)

    single, failed = app.enqueue_many([spec("ada"), spec("bob", fail=True)])
    jobs = {"single": single, "failed": failed}
    run = app.enqueue_workflow(chain(spec("cy"), spec("di", fail=True)))
    batch = app.batch([spec("ed"), spec("fi", fail=True)],
                      meta={"api_token": SECRETS["batch meta"]})
    app.drain(include_scheduled=True)
    jobs.update(workflow=run.jobs[0], batch=batch.jobs[0])
    return World(app, jobs, run.id, batch.id)


@pytest.fixture
def world(db_url: str) -> Iterator[World]:
    built = _build(db_url)
    try:
        yield built
    finally:
        built.app.close()


def _leaks(text: str) -> list[str]:
    return [place for place, secret in SECRETS.items() if secret in text]


def _page_paths(world: World) -> list[str]:
    paths = ["/", "/jobs", "/jobs?task=login", "/jobs?state=discarded", "/failures",
             "/queues", "/workers", "/metrics", f"/workflows/{world.workflow_id}",
             f"/batches/{world.batch_id}"]
    return paths + [f"/jobs/{job.id}" for job in world.app.list_jobs(limit=100)]


def test_the_world_holds_every_secret_unmasked(world: World) -> None:
    """The seeds are really stored (else the checks below would prove nothing)."""
    stored = json.dumps([_raw(j) for j in world.app.list_jobs(limit=100)])
    batch = world.app.get_batch(world.batch_id)
    assert batch is not None
    stored += json.dumps(batch.meta)
    assert sorted(_leaks(stored)) == sorted(SECRETS)


def _raw(job: Job) -> dict[str, Any]:
    return {"args": job.args, "kwargs": job.kwargs, "result": job.result, "meta": job.meta,
            "errors": job.errors, "progress": job.progress_message}


def test_no_dashboard_page_shows_a_secret(world: World) -> None:
    browser: Browser
    for browser in browser_for(world.app):
        leaks = {}
        for path in _page_paths(world):
            response = browser.get(path)
            assert response.status_code == 200, (path, response.status_code)
            if found := _leaks(response.text):
                leaks[path] = found
        assert not leaks, f"secrets shown (page: places): {leaks}"
        assert "[redacted]" in browser.get(f"/jobs/{world.jobs['single'].id}").text


def _cli_commands(world: World) -> list[list[str]]:
    commands: list[list[str]] = [["jobs", "list"], ["jobs", "list", "--state", "discarded"],
                                 ["workflows", "show", world.workflow_id],
                                 ["batches", "show", str(world.batch_id)]]
    for job in world.app.list_jobs(limit=100):
        commands += [["jobs", "show", str(job.id)], ["jobs", "explain", str(job.id)]]
    return commands + [[*c, "--json"] for c in commands]


def test_no_cli_output_shows_a_secret(world: World) -> None:
    runner = CliRunner()
    leaks = {}
    for command in _cli_commands(world):
        result = runner.invoke(cli, [*command, "--url", world.app.url], catch_exceptions=False)
        assert result.exit_code == 0, (command, result.output)
        if found := _leaks(result.output):
            leaks[" ".join(command)] = found
    assert not leaks, f"secrets shown (command: places): {leaks}"
