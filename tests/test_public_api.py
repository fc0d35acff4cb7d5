"""The public surface: exported names are pinned, and task signatures stay typed.

The typing checks run under ``mypy --strict`` (part of ``make test``): an expected
error marked ``type: ignore[...]`` that stopped being an error fails mypy as unused.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, assert_type

import click
import pytest
from click.testing import CliRunner

import conveyor
import conveyor.cli
from conveyor import Conveyor, Job, Task, TaskWithOptions

EXPORTED = [
    # workflows and batches (docs/workflows.md)
    "Batch",
    "BatchClosedError",
    "BatchNotFoundError",
    "Chain",
    "Chord",
    "Chunk",
    "ChunkJob",
    "ChunkResult",
    "Dependency",
    "FailurePolicy",
    "Group",
    "UnknownDependencyError",
    "Workflow",
    "WorkflowEdge",
    "WorkflowError",
    "WorkflowInfo",
    "WorkflowRun",
    "chain",
    "chord",
    "group",
    "Cancel",
    "Conveyor",
    "ConveyorConfig",
    "ConveyorError",
    "DatabaseUnavailableError",
    "Discard",
    "Explanation",
    "InvalidStateError",
    "Job",
    "JobEdit",
    "JobCancelledError",
    "JobContext",
    "JobDiscardedError",
    "JobFailedError",
    "JobNotFoundError",
    "JobSpec",
    "JobState",
    "LimitExceeded",
    "Limiter",
    "PayloadTooLargeError",
    "Permit",
    "QueueInfo",
    "RateLimit",
    "Schedule",
    "ScheduleInfo",
    "ScheduleNotFoundError",
    "SchemaError",
    "SearchPage",
    "Snooze",
    "StateChange",
    "StorageFullError",
    "Task",
    "TaskWithOptions",
    "Throttle",
    "Unique",
    "WaitTimeoutError",
    "WorkerConfig",
    "__version__",
    "current_job",
]


def test_exported_names_are_pinned() -> None:
    assert sorted(conveyor.__all__) == sorted(EXPORTED)
    for name in conveyor.__all__:
        assert getattr(conveyor, name) is not None
    # "@py_builtins" and "@pytest_ar": pytest's assertion rewriting, which covers the
    # whole package once it ships a pytest plugin (conveyor.testing.pytest_plugin).
    public_modules = [n for n in dir(conveyor)
                      if not n.startswith(("_", "@")) and n not in EXPORTED]
    # Submodules that are meant to be imported by path, not names leaking from internals.
    assert set(public_modules) <= {"cli", "web", "otel", "contrib", "testing"}, public_modules


def test_the_testing_module_is_pinned() -> None:
    import conveyor.testing

    assert sorted(conveyor.testing.__all__) == [
        "DrainResult", "Outcome", "VirtualClock", "assert_enqueued", "enqueued_jobs",
        "refute_enqueued"]


def test_enqueue_keeps_the_task_signature(tmp_path: Path) -> None:
    app = Conveyor(f"sqlite:///{tmp_path}/t.db")

    @app.task(queue="mail")
    async def send_email(to: str, subject: str) -> None: ...

    @app.task
    def resize(path: str, width: int = 800) -> dict[str, int]:
        return {"width": width}

    assert isinstance(send_email, Task)
    assert_type(send_email("a@b.c", "hi"), Coroutine[Any, Any, None]).close()
    assert_type(resize("/p"), dict[str, int])  # calling the task calls the function
    assert isinstance(resize.options(delay=1), TaskWithOptions)
    assert_type(resize.enqueue("/p", width=10), Job)
    resize.enqueue(1)  # type: ignore[arg-type]
    # a misspelt keyword is refused at runtime too, before anything is stored
    with pytest.raises(TypeError, match=r"arguments do not fit task 'send_email'.*'subject'"):
        send_email.enqueue("a@b.c", subjekt="x")  # type: ignore[call-arg]
    assert app.list_jobs(queue="mail") == []
    resize.options(priority=1).enqueue("/p", width="wide")  # type: ignore[arg-type]
    assert_type(app.enqueue_many([resize.job("/q")]), list[Job])
    assert_type(app.enqueue_many_ids([resize.job("/q")]), list[int])  # ids only
    app.close()


def test_progress_reporting_is_pinned() -> None:
    """``current_job().set_progress`` / ``update_meta`` (issue 13) and the fields a
    job carries them back in."""
    for name in ("set_progress", "update_meta", "progress", "meta"):
        assert hasattr(conveyor.JobContext, name), name
    fields = {f for f in Job.__dataclass_fields__}
    assert {"progress", "progress_message"} <= fields

    def typed(ctx: conveyor.JobContext, job: Job) -> None:
        assert_type(ctx.set_progress(0.5, "half"), None)
        assert_type(ctx.update_meta({"k": 1}), None)
        assert_type(ctx.progress, float | None)
        assert_type(job.progress, float | None)
        assert_type(job.progress_message, str | None)

    assert callable(typed)


#: Never loaded by ``import conveyor``: drivers, the CLI's and the dashboard's libraries.
HEAVY = ("psycopg", "psycopg_pool", "sqlite3", "rich", "click", "jinja2", "starlette")


def _loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after ``code`` (run in a subprocess, so
    this test process's own imports do not count)."""
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"],
        capture_output=True, text=True, timeout=60, check=True)
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_import_conveyor_loads_no_driver_and_no_interface_library() -> None:
    loaded = _loaded_after("import conveyor")
    assert not {m.split(".")[0] for m in loaded} & set(HEAVY)
    assert not {m for m in loaded if m.startswith(("conveyor._app", "conveyor._storage",
                                                   "conveyor._runtime", "conveyor.cli"))}


def test_an_app_that_only_enqueues_loads_no_worker_and_no_postgres_driver() -> None:
    loaded = _loaded_after("from conveyor import Conveyor\nConveyor('sqlite:///:memory:x')")
    assert not {"conveyor._runtime.worker", "conveyor._runtime.executor",
                "conveyor._runtime.inprocess"} & loaded
    assert "conveyor._explain" not in loaded
    assert not {m.split(".")[0] for m in loaded} & {"psycopg", "psycopg_pool", "rich", "click"}


def test_conveyor_help_loads_no_command_module() -> None:
    """``conveyor --help`` lists the commands from ``COMMANDS``, importing none of them."""
    loaded = _loaded_after(
        "import contextlib, io\nfrom conveyor.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['--help'])")
    from conveyor.cli import COMMANDS

    modules = {f"conveyor.cli.{module}" for module, _, _ in COMMANDS.values()}
    assert not modules & loaded
    assert not {m.split(".")[0] for m in loaded} & {"rich", "psycopg", "sqlite3", "jinja2"}
    assert "conveyor._app" not in loaded


def test_the_command_table_matches_the_commands() -> None:
    """Each one-line help in ``COMMANDS`` is its command's own, and each entry names it."""
    from conveyor.cli import COMMANDS, cli

    ctx = click.Context(cli)
    for name, (_, _, summary) in COMMANDS.items():
        command = cli.get_command(ctx, name)
        assert command is not None and command.name == name
        assert command.get_short_help_str(1000) == summary, name
    assert cli.get_command(ctx, "no-such-command") is None
    assert "Usage:" in CliRunner().invoke(cli, ["--help"]).output


def test_version_has_one_source() -> None:
    from conveyor._version import __version__

    assert conveyor.__version__ == __version__
    result = CliRunner().invoke(conveyor.cli.cli, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"conveyor, version {__version__}"
    pyproject = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject  # read from conveyor._version, not repeated


def test_a_postgres_url_without_psycopg_names_the_extra(tmp_path: Path) -> None:
    """psycopg made unimportable in a child: ``Conveyor(url)`` raises one line naming
    ``conveyor[postgres]``, and the CLI exits 3 with it (tests/test_package.py checks the
    same on a real install without the extra)."""
    block = "import sys\nsys.modules['psycopg'] = None\nsys.modules['psycopg_pool'] = None\n"
    child = block + textwrap.dedent("""
        from conveyor import Conveyor, DatabaseUnavailableError
        try:
            Conveyor("postgresql://127.0.0.1:1/none")
        except DatabaseUnavailableError as exc:
            print(exc)
        from conveyor.cli import main
        main(["jobs", "list", "--url", "postgresql://127.0.0.1:1/none"])
    """)
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path, check=False)
    line = ("PostgreSQL URLs need the psycopg driver, which is not installed: "
            "pip install 'conveyor[postgres]'")
    assert done.stdout.strip() == line
    assert done.returncode == 3, done.stderr
    assert done.stderr.strip().count("\n") == 0 and line in done.stderr
