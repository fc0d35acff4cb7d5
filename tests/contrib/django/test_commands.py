"""``manage.py migrate`` creates Conveyor's schema; ``manage.py conveyor_worker`` has
every flag of ``conveyor worker`` and runs jobs, in one process or several."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("django", reason="Django 6 needs Python >= 3.12: tests/contrib/django "
                    "run in .venv-django (make test-django)")

from typing import Any

from django.tasks import TaskResultStatus

from conveyor import Conveyor
from conveyor.cli.worker import config_fields, worker

from .conftest import ROOT, Project, create_database, drop_database


def test_migrate_creates_conveyors_schema(project: Project, postgres_admin_url: str) -> None:
    fresh = create_database(postgres_admin_url)
    conveyor = Conveyor(fresh)
    try:
        assert conveyor.pending_migrations()  # an empty database: everything pending
        project.manage("migrate", env={"EXAMPLE_DATABASE_URL": fresh})
        assert conveyor.pending_migrations() == []
        shown = project.manage("showmigrations", "conveyor",
                               env={"EXAMPLE_DATABASE_URL": fresh}).stdout
        assert "[X] 0001_initial" in shown
        again = project.manage("migrate", env={"EXAMPLE_DATABASE_URL": fresh})
        assert "No migrations to apply" in again.stdout
    finally:
        conveyor.close()
        drop_database(postgres_admin_url, fresh)


def test_worker_help_has_every_flag_of_conveyor_worker(project: Project) -> None:
    shown = project.manage("conveyor_worker", "--help").stdout
    # Every long option of the real `conveyor worker` (whatever it gains later) but the
    # hidden ones (its supervisor's own, e.g. --supervised-child), and every WorkerConfig
    # field that has a flag of its own.
    flags = [opt for param in worker.params if not getattr(param, "hidden", False)
             for opt in param.opts if opt.startswith("--")]
    flags += ["--" + f.name.replace("_", "-") for f in config_fields()]
    assert {"--queues", "--concurrency", "--processes", "--burst", "--label"} <= set(flags)
    assert [f for f in flags if f not in shown and f not in ("--url", "--app")] == []
    assert "conveyor_worker" in shown


@pytest.mark.parametrize(("args", "message"), [
    (["--url", "sqlite:///x.db"], "set TASKS['default']['OPTIONS']['URL'] instead"),
    (["--backend", "nope"], "nope"),
    (["--lease-ttl", "1", "--heartbeat-interval", "2"], "lease_ttl must be longer"),
    (["-q", "bad queue!"], "invalid queue name"),
])
def test_worker_refuses_bad_options(project: Project, args: list[str], message: str) -> None:
    done = project.manage("conveyor_worker", "--burst", *args, check=False)
    assert done.returncode != 0
    assert message in done.stderr


def test_worker_with_processes_finds_the_project(project: Project, backends: Any,
                                                 tmp_path: Path) -> None:
    from shop.tasks import whoami

    ids = [whoami.enqueue(f"p{i}").id for i in range(6)]
    # Neither the cwd nor PYTHONPATH has the example: the children get it from the command.
    done = project.manage("conveyor_worker", "--burst", "--processes", "2",
                          env={"PYTHONPATH": str(ROOT)}, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert {whoami.get_result(i).status for i in ids} == {TaskResultStatus.SUCCESSFUL}


def test_the_worker_closes_connections_around_each_job_as_django_does(project: Project) -> None:
    from tests.contrib.django.jobs_for_tests import connection_state

    ids = [connection_state.enqueue().id for _ in range(3)]
    # One queue slot, so one thread runs all three: CONN_MAX_AGE is 0, so as after a
    # request, the connection of one job is closed when it ends.
    project.burst("-q", "default:1")
    seen = [connection_state.get_result(i).return_value for i in ids]
    assert [s["was_open"] for s in seen] == [False, False, False]
    assert len({s["pid"] for s in seen}) == 3
