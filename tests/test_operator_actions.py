"""One operator door: every action (retry, cancel, discard, delete, purge, bulk retry and
discard, cancel workflow, trigger schedule) is written once in the app. The Python API,
the CLI and the dashboard call it, each naming itself in the state-change events, and
the same refusal is the same error everywhere, mapped by each interface to its own
output (Django's mounted dashboard: tests/contrib/django/test_dashboard.py)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from conveyor import Conveyor, InvalidStateError, JobNotFoundError, JobState, StateChange, chain
from conveyor._app import JobFilter
from conveyor.cli import cli

from .apps import events_app
from .apps.events_app import noop

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from conveyor.web import create_app

from .web.conftest import BASE, Browser

APP = "tests.apps.events_app:app"
CRON = "0 3 * * *"


@pytest.fixture
def recorded(db_url: str) -> Iterator[Conveyor]:
    """The events app on this test's database, its record emptied."""
    with events_app.app.rebind(db_url):
        events_app.SEEN.clear()
        yield events_app.app
    events_app.app.close()


def discarded(app: Conveyor) -> int:
    job = noop.enqueue()
    app.discard_job(job.id)
    return job.id


def waiting(app: Conveyor) -> int:
    return noop.enqueue().id


def workflow(app: Conveyor) -> str:
    return app.enqueue_workflow(chain(noop.job(), noop.job())).id


def schedule(app: Conveyor) -> str:
    app.add_schedule("nightly", cron=CRON, task="noop")
    return "nightly"


#: action -> (what it acts on, the Python API call, the CLI's arguments, the dashboard's
#: post (path and form)); each given what the setup returned.
Setup = Callable[[Conveyor], Any]
Call = Callable[[Conveyor, Any, str], object]
CliArgs = Callable[[Any], list[str]] | None
Post = Callable[[Any], tuple[str, dict[str, str]]] | None
ACTIONS: dict[str, tuple[Setup, Call, CliArgs, Post]] = {
    "retry": (discarded, lambda a, i, s: a.retry_job(i, source=s),
              lambda i: ["jobs", "retry", str(i)], lambda i: (f"/jobs/{i}/retry", {})),
    "cancel": (waiting, lambda a, i, s: a.cancel_job(i, source=s),
               lambda i: ["jobs", "cancel", str(i)], lambda i: (f"/jobs/{i}/cancel", {})),
    "discard": (waiting, lambda a, i, s: a.discard_job(i, source=s),
                lambda i: ["jobs", "discard", str(i)], lambda i: (f"/jobs/{i}/discard", {})),
    "delete": (waiting, lambda a, i, s: a.delete_job(i, source=s),
               lambda i: ["jobs", "delete", str(i)], lambda i: (f"/jobs/{i}/delete", {})),
    "bulk-retry": (discarded,
                   lambda a, i, s: a.retry_matching(JobFilter(ids=(i,)), limit=10, source=s),
                   lambda i: ["jobs", "retry", str(i), "--state", "discarded", "--yes"],
                   lambda i: ("/bulk", {"action": "retry", "state": "discarded"})),
    "bulk-discard": (waiting, lambda a, i, s: a.discard_matching(
                         JobFilter(states=(JobState.AVAILABLE,)), limit=10, source=s),
                     None, lambda i: ("/bulk", {"action": "discard", "state": "available"})),
    "purge": (discarded, lambda a, i, s: a.purge_jobs(states="discarded", source=s),
              lambda i: ["jobs", "purge", "--state", "discarded", "--yes"], None),
    "cancel-workflow": (workflow, lambda a, w, s: a.cancel_workflow(w, source=s), None,
                        lambda w: (f"/workflows/{w}/cancel", {})),
    "trigger-schedule": (schedule, lambda a, n, s: a.trigger_schedule(n, source=s),
                         lambda n: ["schedules", "run", n],
                         lambda n: (f"/schedules/{n}/trigger", {})),
}


def sources(seen: list[StateChange]) -> set[str]:
    assert seen, "the action announced no state change"
    return {change.source for change in seen}


@pytest.mark.parametrize("action", ACTIONS)
def test_the_python_api_names_itself_or_the_source_given(recorded: Conveyor,
                                                         action: str) -> None:
    setup, call, _, _ = ACTIONS[action]
    target = setup(recorded)
    events_app.SEEN.clear()
    call(recorded, target, "api")
    assert sources(events_app.SEEN) == {"api"}
    target = setup(recorded)
    events_app.SEEN.clear()
    call(recorded, target, "ops-script")
    assert sources(events_app.SEEN) == {"ops-script"}


def test_the_python_api_defaults_to_api(recorded: Conveyor) -> None:
    job_id = discarded(recorded)
    events_app.SEEN.clear()
    recorded.retry_job(job_id)
    recorded.cancel_job(job_id)
    assert sources(events_app.SEEN) == {"api"}


@pytest.mark.parametrize("action", [a for a, (_, _, c, _) in ACTIONS.items() if c is not None])
def test_the_cli_names_itself(recorded: Conveyor, db_url: str, action: str) -> None:
    setup, _, args, _ = ACTIONS[action]
    target = setup(recorded)
    events_app.SEEN.clear()
    assert args is not None
    result = CliRunner(env={"CONVEYOR_URL": None, "CONVEYOR_APP": None}).invoke(
        cli, [*args(target), "--app", APP, "--url", db_url], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert sources(events_app.SEEN) == {"cli"}


def browser(app: Conveyor, **options: Any) -> Iterator[Browser]:
    with TestClient(create_app(app, **options), base_url=BASE) as client:
        yield Browser(client)


@pytest.mark.parametrize("action", [a for a, (_, _, _, w) in ACTIONS.items() if w is not None])
@pytest.mark.parametrize("source", ["dashboard", "django"])
def test_the_dashboard_names_its_source(recorded: Conveyor, action: str, source: str) -> None:
    """``create_app(source=...)``: Django's mounted dashboard passes "django"."""
    setup, _, _, post = ACTIONS[action]
    target = setup(recorded)
    events_app.SEEN.clear()
    assert post is not None
    path, form = post(target)
    options = {} if source == "dashboard" else {"source": source}
    for web in browser(recorded, **options):
        done = web.post(path, form)
        assert done.status_code == 303
    assert sources(events_app.SEEN) == {source}


# -- the same refusal everywhere -------------------------------------------------------------

#: Actions refused on a completed job, and their past participle.
REFUSALS = {"cancel": "cancelled", "discard": "discarded"}


def completed(app: Conveyor) -> int:
    """A job made completed the way a worker does it: by running it (inline drain)."""
    job = noop.enqueue()
    app.drain()
    found = app.get_job(job.id)
    assert found is not None and found.state is JobState.COMPLETED
    return job.id


@pytest.mark.parametrize("action", ["cancel", "discard"])
def test_a_refused_action_is_invalid_state_with_the_job(recorded: Conveyor,
                                                        action: str) -> None:
    job_id = completed(recorded)
    call = ACTIONS[action][1]
    with pytest.raises(InvalidStateError, match=f"job {job_id} is completed and cannot be "
                       f"{REFUSALS[action]}") as refused:
        call(recorded, job_id, "api")
    assert refused.value.job is not None and refused.value.job.state is JobState.COMPLETED
    # the CLI says the same, exit 1; the dashboard says it on the job's page
    cli_out = CliRunner(env={"CONVEYOR_URL": None, "CONVEYOR_APP": None}).invoke(
        cli, ["jobs", action, str(job_id), "--app", APP, "--url", recorded.url])
    assert cli_out.exit_code == 1
    assert str(refused.value) in cli_out.output
    for web in browser(recorded):
        done = web.post(f"/jobs/{job_id}/{action}")
        assert done.status_code == 303
        page = web.get(done.headers["location"]).text
        assert f"Job {job_id} is completed and cannot be {REFUSALS[action]}" in page


@pytest.mark.parametrize("action", ["retry", "cancel", "discard", "delete"])
def test_an_unknown_job_is_not_found_everywhere(recorded: Conveyor, action: str) -> None:
    call = ACTIONS[action][1]
    with pytest.raises(JobNotFoundError, match="no job with id 999999"):
        call(recorded, 999_999, "api")
    cli_out = CliRunner(env={"CONVEYOR_URL": None, "CONVEYOR_APP": None}).invoke(
        cli, ["jobs", action, "999999", "--app", APP, "--url", recorded.url])
    assert cli_out.exit_code == 1 and "no job with id 999999" in cli_out.output
    for web in browser(recorded):
        assert web.post(f"/jobs/999999/{action}").status_code == 404


@pytest.mark.parametrize("bad", ["", "two words", "x" * 65, 7])
def test_a_source_is_a_short_name(recorded: Conveyor, bad: Any) -> None:
    job_id = discarded(recorded)
    with pytest.raises(ValueError, match="source must be"):
        recorded.retry_job(job_id, source=bad)
    found = recorded.get_job(job_id)
    assert found is not None and found.state is JobState.DISCARDED
