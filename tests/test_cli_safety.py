"""Issue 11, the CLI's share: stored text cannot drive the terminal, secrets are redacted
as on the dashboard, huge integers are usage errors, import errors show the user's
traceback, unknown queues are refused, workers serve the app's queues, `jobs retry`
takes several ids and filters, and tables fit the terminal."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import logging
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from rich.console import Console

from conveyor import Conveyor, Job, JobState, WorkerConfig
from conveyor.cli import cli
from conveyor.cli._logging import JsonFormatter, TextFormatter
from conveyor.cli.jobs import jobs_table

from .apps.first_hour import HOSTILE
from .test_cli import ROOT, invoke, run_cli

FIRST_HOUR = "tests.apps.first_hour:app"
RAW = ("\x1b", "\x07", "\r", "\x9b")
HUGE = str(2**70)


def no_raw_controls(text: str) -> None:
    for char in RAW:
        assert char not in text, f"{char!r} reached the terminal: {text!r}"


@pytest.fixture
def hostile_app(db_url: str) -> Iterator[Conveyor]:
    app = Conveyor(db_url)

    @app.task(name="explode", queue="hostile", max_attempts=1)
    def explode(*args: object, **kwargs: object) -> None:
        raise RuntimeError(HOSTILE)

    @app.task(name="ok", queue="hostile")
    def ok(*args: object, **kwargs: object) -> None:
        return None

    try:
        yield app
    finally:
        app.close()


def burst(app: Conveyor, *queues: str) -> None:
    async def run() -> None:
        try:
            await app.run_worker({q: 5 for q in queues}, config=WorkerConfig(burst=True))
        finally:
            await app.close_async()

    asyncio.run(run())


# -- 2. terminal escape sequences ---------------------------------------------------------


def test_jobs_list_and_show_escape_control_characters(hostile_app: Conveyor,
                                                      db_url: str) -> None:
    job = hostile_app.tasks["explode"].enqueue(HOSTILE, note=HOSTILE)
    burst(hostile_app, "hostile")
    for args in (["jobs", "show", str(job.id)], ["jobs", "list"],
                 ["jobs", "explain", str(job.id)]):
        result = invoke(*args, "--url", db_url)
        assert result.exit_code == 0, result.output
        no_raw_controls(result.stdout)
    shown = invoke("jobs", "show", str(job.id), "--url", db_url).stdout
    assert "\\x1b[2J" in shown and "\\x07" in shown and "\\x0d" in shown
    as_json = invoke("jobs", "show", str(job.id), "--json", "--url", db_url).stdout
    no_raw_controls(as_json)
    doc = json.loads(as_json)  # still the same values, escaped as JSON
    assert doc["args"] == [HOSTILE] and doc["kwargs"] == {"note": HOSTILE}
    assert HOSTILE in doc["errors"][-1]["error"]


def test_task_and_queue_names_are_escaped_in_tables() -> None:
    real = _a_job()
    job = dataclasses.replace(real, task="t\x1b[2J", queue="q\x07\rx",
                              errors=[{"error": HOSTILE, "attempt": 1, "at": "now"}])
    out = io.StringIO()
    Console(file=out, width=200, force_terminal=False).print(jobs_table([job]))
    no_raw_controls(out.getvalue())
    assert "t\\x1b[2J" in out.getvalue()


def _a_job() -> Job:
    with closing(Conveyor("sqlite:///:memory:")) as app:
        task = app.task(name="t")(lambda: None)
        return task.enqueue()


def _record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    try:
        raise RuntimeError(HOSTILE)
    except RuntimeError:
        exc_info = sys.exc_info()
    record = logging.LogRecord("conveyor.job", logging.WARNING, __file__, 1, message, args,
                               exc_info)
    record.__dict__.update(extra)
    return record


def test_log_formatters_escape_control_characters() -> None:
    record = _record("job failed: %s", HOSTILE, task="t\x1b[2J", queue="q\r", job_id=1)
    text = TextFormatter().format(record)
    no_raw_controls(text)
    assert "\\x1b[2J" in text and "task=t\\x1b[2J" in text
    line = JsonFormatter().format(_record("job failed: %s", HOSTILE, task="t\x1b[2J"))
    no_raw_controls(line)
    assert json.loads(line)["message"] == f"job failed: {HOSTILE}"


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_worker_logs_escape_control_characters(db_url: str, fmt: str) -> None:
    with closing(Conveyor(db_url)) as producer:
        producer.task(name="explode", queue="hostile", max_attempts=1)(lambda *a: None).enqueue(HOSTILE)
    proc = run_cli(ROOT, "worker", FIRST_HOUR, "--burst", "-q", "hostile", "--log-format",
                   fmt, CONVEYOR_URL=db_url)
    assert proc.returncode == 0, proc.stderr
    assert "discarded" in proc.stderr
    no_raw_controls(proc.stderr)


# -- 3. one redaction rule ---------------------------------------------------------------


def test_jobs_show_and_list_redact_like_the_dashboard(app: Conveyor, db_url: str) -> None:
    from conveyor._redact import redact_secrets
    from conveyor.web import Redactor, show_everything
    from conveyor.web import redact_secrets as web_redact

    assert web_redact is redact_secrets and callable(show_everything)
    assert Redactor is not None
    task = app.task(name="login")(lambda **kw: None)
    job = task.enqueue(user="ada", password="hunter2", api_key="sk-live-1")
    for args in (["jobs", "show", str(job.id)], ["jobs", "show", str(job.id), "--json"],
                 ["jobs", "list"], ["jobs", "list", "--json"]):
        out = invoke(*args, "--url", db_url).stdout
        assert "hunter2" not in out and "sk-live-1" not in out, args
        assert "[redacted]" in out and "ada" in out, args
    shown = json.loads(invoke("jobs", "show", str(job.id), "--json", "--url", db_url).stdout)
    assert shown["kwargs"] == redact_secrets(job).kwargs
    everything = invoke("jobs", "show", str(job.id), "--show-secrets", "--url", db_url)
    assert "hunter2" in everything.stdout


# -- 4. integers beyond 64 bits ------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ["jobs", "show", HUGE], ["jobs", "retry", HUGE], ["jobs", "cancel", HUGE],
    ["jobs", "explain", HUGE], ["jobs", "list", "--limit", HUGE],
    ["jobs", "retry", "--queue", "default", "--limit", HUGE],
    ["queues", "scale", "default", HUGE],
])
def test_huge_integers_are_one_line_usage_errors(tmp_path: Path, args: list[str]) -> None:
    proc = run_cli(tmp_path, *args, "--url", f"sqlite:///{tmp_path / 'x.db'}")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "OverflowError" not in proc.stderr
    assert "Error:" in proc.stderr


# -- 5. import errors -----------------------------------------------------------------------


def test_import_errors_show_the_users_traceback(tmp_path: Path) -> None:
    (tmp_path / "raising_tasks.py").write_text(
        "from conveyor import Conveyor\n"
        "app = Conveyor()\n"
        "\n"
        "def load_settings():\n"
        "    raise KeyError('SMTP_HOST')\n"
        "\n"
        "load_settings()\n")
    proc = run_cli(tmp_path, "worker", "raising_tasks:app", "--burst")
    assert proc.returncode == 2, proc.stderr
    path = str(tmp_path / "raising_tasks.py")
    assert f'File "{path}", line 7' in proc.stderr and f'File "{path}", line 5' in proc.stderr
    assert "raise KeyError('SMTP_HOST')" in proc.stderr
    assert "importlib" not in proc.stderr and "conveyor/cli" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("Error: importing")

    (tmp_path / "broken_tasks.py").write_text(
        "from conveyor import Conveyor\n"
        "app = Conveyor()\n"
        "def send(to:\n"
        "    pass\n")
    proc = run_cli(tmp_path, "worker", "broken_tasks:app", "--burst")
    assert proc.returncode == 2, proc.stderr
    assert str(tmp_path / "broken_tasks.py") in proc.stderr
    assert "line 3" in proc.stderr and "^" in proc.stderr and "SyntaxError" in proc.stderr


# -- 6. unknown queues ----------------------------------------------------------------------


def test_queue_actions_refuse_a_queue_nothing_names(app: Conveyor, db_url: str) -> None:
    app.task(name="send_email", queue="mail")(lambda: None).enqueue()
    for args in (["pause", "mial"], ["resume", "mial"], ["scale", "mial", "3"],
                 ["rate", "mial", "10/s"]):
        result = invoke("queues", *args, "--url", db_url)
        assert result.exit_code == 2, (args, result.output)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "mail" in lines[0] and "--force" in lines[0], lines
    names = [q.name for q in app.list_queues()]
    assert "mial" not in names
    assert invoke("queues", "pause", "mail", "--url", db_url).exit_code == 0
    assert invoke("queues", "pause", "later", "--force", "--url", db_url).exit_code == 0
    paused = {q.name for q in app.list_queues() if q.paused}
    assert paused == {"mail", "later"}
    # a queue the app's tasks name is known even with no job yet
    assert invoke("queues", "pause", "hostile", "--app", FIRST_HOUR, "--url",
                  db_url).exit_code == 0


# -- 7a. a worker without -q ------------------------------------------------------------------


def test_worker_without_q_serves_every_queue_the_app_names(db_url: str) -> None:
    with closing(Conveyor(db_url)) as producer:
        send = producer.task(name="send_email", queue="mail")(lambda to, subject: None)
        narrowed = send.enqueue("a@b.c", subject="hi")
    proc = run_cli(ROOT, "worker", FIRST_HOUR, "--burst", "-q", "default", CONVEYOR_URL=db_url)
    assert proc.returncode == 0, proc.stderr
    with closing(Conveyor(db_url)) as reader:
        job = reader.get_job(narrowed.id)
        assert job is not None and job.state is JobState.AVAILABLE  # -q narrows
    proc = run_cli(ROOT, "worker", FIRST_HOUR, "--burst", CONVEYOR_URL=db_url)
    assert proc.returncode == 0, proc.stderr
    started = [line for line in proc.stderr.splitlines() if "started on queues" in line]
    assert len(started) == 1 and "'mail'" in started[0] and "'hostile'" in started[0]
    with closing(Conveyor(db_url)) as reader:
        job = reader.get_job(narrowed.id)
        assert job is not None and job.state is JobState.COMPLETED


def test_run_worker_without_queues_serves_the_apps_queues(app: Conveyor) -> None:
    send = app.task(name="send_email", queue="mail")(lambda: "sent")
    job = send.enqueue()

    async def run() -> None:
        try:
            await app.run_worker(config=WorkerConfig(burst=True))
        finally:
            await app.close_async()

    asyncio.run(run())
    done = app.get_job(job.id)
    assert done is not None and done.state is JobState.COMPLETED


def test_run_worker_serves_explicit_queues_as_given(app: Conveyor) -> None:
    """Only an unset queue list widens: an explicit one equal to the default does not."""
    send = app.task(name="send_email", queue="mail")(lambda: "sent")
    job = send.enqueue()
    other = app.task(name="other")(lambda: "done").enqueue()

    async def run() -> None:
        try:
            await app.run_worker(config=WorkerConfig(queues={"default": 10}, burst=True))
        finally:
            await app.close_async()

    asyncio.run(run())
    done, waiting = app.get_job(other.id), app.get_job(job.id)
    assert done is not None and done.state is JobState.COMPLETED
    assert waiting is not None and waiting.state is JobState.AVAILABLE


# -- 7c. jobs retry: several ids, filters ------------------------------------------------------


def test_jobs_retry_several_ids_and_filters(hostile_app: Conveyor, db_url: str) -> None:
    explode, ok = hostile_app.tasks["explode"], hostile_app.tasks["ok"]
    failed = [explode.enqueue(i).id for i in range(3)]
    completed = ok.enqueue().id
    burst(hostile_app, "hostile")
    cancelled = ok.options(delay=3600).enqueue().id
    hostile_app.cancel_job(cancelled)

    def state(job_id: int) -> JobState:
        job = hostile_app.get_job(job_id)
        assert job is not None
        return job.state

    result = invoke("jobs", "retry", str(failed[0]), str(failed[1]), "--json", "--url", db_url)
    assert result.exit_code == 0, result.output
    assert [j["state"] for j in json.loads(result.stdout)] == ["available", "available"]

    refused = CliInput("n\n")
    answer = refused.invoke("jobs", "retry", "--queue", "hostile", "--url", db_url)
    assert answer.exit_code == 1
    assert "Retry 2 job(s) in state retryable, discarded, cancelled" in answer.output
    assert state(failed[2]) is JobState.DISCARDED

    confirmed = CliInput("y\n").invoke("jobs", "retry", "--task", "explode", "--queue",
                                       "hostile", "--url", db_url)
    assert confirmed.exit_code == 0, confirmed.output
    assert state(failed[2]) is JobState.AVAILABLE
    assert state(cancelled) is JobState.CANCELLED  # another task
    assert state(completed) is JobState.COMPLETED  # never without --state completed

    assert invoke("jobs", "retry", "--queue", "hostile", "--yes", "--url",
                  db_url).exit_code == 0
    assert state(cancelled) is JobState.AVAILABLE and state(completed) is JobState.COMPLETED
    assert invoke("jobs", "retry", "--state", "completed", "--yes", "--url",
                  db_url).exit_code == 0
    assert state(completed) is JobState.AVAILABLE
    assert invoke("jobs", "retry", "--url", db_url).exit_code == 2


@dataclasses.dataclass
class CliInput:
    text: str

    def invoke(self, *args: str) -> Result:
        runner = CliRunner(env={"CONVEYOR_URL": None, "CONVEYOR_APP": None, "COLUMNS": "200"})
        return runner.invoke(cli, list(args), input=self.text, catch_exceptions=False)


# -- 7d. tables fit the terminal ------------------------------------------------------------


@pytest.mark.parametrize("columns", [80, 100, 160])
def test_jobs_table_fits_the_terminal(hostile_app: Conveyor, db_url: str, columns: int) -> None:
    explode = hostile_app.tasks["explode"]
    ids = [explode.enqueue("x" * 300, note="word " * 100).id for _ in range(3)]
    hostile_app.tasks["ok"].enqueue("y " * 300)
    burst(hostile_app, "hostile")
    result = invoke("jobs", "list", "--url", db_url, COLUMNS=str(columns))
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert all(len(line) <= columns for line in lines), lines
    rows = [line for line in lines if " hostile " in line]
    assert len(rows) == 4, lines  # one line per job
    assert "…" in result.stdout
    doc = json.loads(invoke("jobs", "list", "--json", "--url", db_url,
                            COLUMNS=str(columns)).stdout)
    assert {j["id"] for j in doc} >= set(ids) and doc[-1]["args"] == ["x" * 300]
