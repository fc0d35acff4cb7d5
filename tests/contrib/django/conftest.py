"""Django for the tests: the example project (examples/django) on a throwaway
PostgreSQL database (Django's and Conveyor's tables in it), with the backends of
``tests/contrib/django/settings.py``. Django is set up once per test process.

``run_manage(...)`` runs ``examples/django/manage.py`` in a subprocess with the same
settings: the worker is always a real ``manage.py conveyor_worker``.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests import _pg, _require

_require.django_importable()

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "django"
MANAGE = EXAMPLE / "manage.py"
SETTINGS = "tests.contrib.django.settings"


def create_database(admin_url: str) -> str:
    name = f"conveyor_django_{secrets.token_hex(6)}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return _pg.with_database(admin_url, name)


def drop_database(admin_url: str, url: str) -> None:
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@dataclasses.dataclass
class Project:
    """The example project as the tests run it."""

    env: dict[str, str]
    database_url: str

    def manage(self, *args: str, timeout: float = 90, check: bool = True,
               env: dict[str, str] | None = None, cwd: Path = EXAMPLE,
               ) -> subprocess.CompletedProcess[str]:
        """``manage.py ARGS`` in a subprocess; its output is shown when it fails."""
        done = subprocess.run([sys.executable, str(MANAGE), *args], cwd=cwd,
                              env={**self.env, **(env or {})}, capture_output=True,
                              text=True, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"manage.py {' '.join(args)} exited {done.returncode}\n"
                                 f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}")
        return done

    def burst(self, *args: str) -> subprocess.CompletedProcess[str]:
        """A real worker until the queues are empty."""
        return self.manage("conveyor_worker", "--burst", "--stage-interval", "0.05", *args)


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONVEYOR_URL", "CONVEYOR_APP"))}
    path = [str(ROOT), str(EXAMPLE), env.get("PYTHONPATH", "")]
    env.update({"PYTHONPATH": os.pathsep.join(p for p in path if p),
                "DJANGO_SETTINGS_MODULE": SETTINGS, **extra})
    return env


@pytest.fixture(scope="session")
def project(postgres_admin_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    """Django set up on a fresh PostgreSQL database, migrated by ``migrate``."""
    main, elsewhere = create_database(postgres_admin_url), create_database(postgres_admin_url)
    lite = tmp_path_factory.mktemp("django") / "lite.db"
    env = base_env(EXAMPLE_DATABASE_URL=main, TEST_CONVEYOR_ELSEWHERE_URL=elsewhere,
                   TEST_CONVEYOR_LITE_URL=f"sqlite:///{lite}")
    saved = dict(os.environ)
    os.environ.update(env)
    for path in (str(EXAMPLE), str(ROOT)):
        if path not in sys.path:
            sys.path.insert(0, path)
    try:
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        yield Project(env, main)
    finally:
        _close_django()
        os.environ.clear()
        os.environ.update(saved)
        drop_database(postgres_admin_url, main)
        drop_database(postgres_admin_url, elsewhere)


def _close_django() -> None:
    from django.db import connections
    from django.tasks import task_backends

    from conveyor.contrib.django import ConveyorBackend

    for backend in task_backends.all():
        if isinstance(backend, ConveyorBackend):
            backend.close()
    connections.close_all()


@pytest.fixture
def backends(project: Project) -> Any:
    """``django.tasks.task_backends`` (after set-up)."""
    from django.tasks import task_backends

    return task_backends
