"""The package as a user installs it: the BUILT wheel (not this tree) in fresh venvs.

One wheel and sdist per session (``python -m build``: the sdist first, the wheel built
from it, so a file the sdist leaves out fails too). With no extras the CLI runs on
SQLite; each extra alone imports only what it needs; migrations run on both backends
and a dashboard page renders from the installed files, so SQL, migrations, templates or
static files left out of the package fail here.

Venvs are made by ``uv`` (the dev extra) from its cache; PyPI must be reachable. Where
``uv``, ``build`` or a Python >= 3.12 for the Django extra is missing the test skips,
except under CI (``CI=true``) or ``CONVEYOR_REQUIRE_PACKAGE=1`` (.ci/run), where it fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import textwrap
import time
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conveyor._version import __version__

from . import _pg

ROOT = Path(__file__).resolve().parent.parent
TRUE = ("1", "true", "yes", "on")
REQUIRED = (os.environ.get("CONVEYOR_REQUIRE_PACKAGE", "").lower() in TRUE
            or os.environ.get("CI", "").lower() in TRUE)

#: What each extra brings (top-level import names). A venv with one extra must not be
#: able to import another extra's packages: the extras stay independent.
EXTRA_PACKAGES: dict[str, set[str]] = {
    "postgres": {"psycopg", "psycopg_pool"},
    "web": {"starlette", "jinja2", "markupsafe", "uvicorn"},  # /metrics needs no client
    "prometheus": {"prometheus_client"},
    "sentry": {"sentry_sdk"},
    "otel": {"opentelemetry"},
    "asgi": {"starlette", "jinja2", "markupsafe"},
    # FastAPI itself requires opentelemetry-api (its own dependency, not Conveyor's)
    "fastapi": {"fastapi", "starlette", "jinja2", "markupsafe", "opentelemetry"},
    "sqlalchemy": {"sqlalchemy"},
    "encryption": {"cryptography"},
    "django": {"django"},
}
ALL_EXTRA_PACKAGES = set().union(*EXTRA_PACKAGES.values())
#: Imported by nothing in the core: ``import conveyor`` must not load them.
HEAVY = ("psycopg", "psycopg_pool", "sqlite3", "rich", "click", "jinja2", "starlette")

Run = Callable[..., subprocess.CompletedProcess[str]]


def _missing(what: str) -> None:
    if REQUIRED:
        pytest.fail(f"{what} (CI or CONVEYOR_REQUIRE_PACKAGE=1: a missing tool fails)", pytrace=False)
    pytest.skip(what)


def _uv() -> str:
    found = shutil.which("uv") or shutil.which("uv", path=str(Path(sys.executable).parent))
    if found is None:
        _missing("uv not found: pip install -e '.[dev]'")
    assert found is not None
    return found


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment less what points Python at this tree."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "CONVEYOR_URL", "CONVEYOR_APP")}
    env["UV_PYTHON_DOWNLOADS"] = "never"
    env.update(extra)
    return env


def _check(argv: list[str], timeout: float = 300, **kwargs: object) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env=_clean_env(), check=False, **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return str(done.stdout)


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``python -m build``'s sdist and wheel (the wheel built from the sdist)."""
    try:
        import build  # noqa: F401
    except ImportError:
        _missing("the build package is missing: pip install -e '.[dev]'")
    uv = _uv()
    # A copy of the tracked files: setuptools would otherwise reuse the tree's stale
    # src/conveyor.egg-info/SOURCES.txt, and ship a file the configuration leaves out.
    source = tmp_path_factory.mktemp("source")
    for name in _check(["git", "ls-files"], cwd=ROOT).splitlines():
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    env = _clean_env(PATH=f"{Path(uv).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run([sys.executable, "-m", "build", "--installer", "uv", "--outdir", str(out),
                           str(source)], capture_output=True, text=True, timeout=300, env=env,
                          check=False)
    assert done.returncode == 0, f"python -m build failed:\n{done.stdout[-3000:]}\n{done.stderr}"
    wheels = list(out.glob("conveyor-*.whl"))
    sdists = list(out.glob("conveyor-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in out.iterdir())
    return {"wheel": wheels[0], "sdist": sdists[0]}


@pytest.fixture(scope="session")
def make_venv(dist: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
              ) -> Callable[..., Path]:
    """``make_venv(name, extras, python)``: a fresh venv with the built wheel installed."""
    uv = _uv()
    made: dict[str, Path] = {}

    def make(name: str, extras: str = "", python: str = sys.executable) -> Path:
        if name in made:
            return made[name]
        venv = tmp_path_factory.mktemp(f"venv-{name}")
        _check([uv, "venv", "-q", "--python", python, str(venv)])
        wheel = f"{dist['wheel']}[{extras}]" if extras else str(dist["wheel"])
        _check([uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), wheel])
        made[name] = venv
        return venv

    return make


def runner(venv: Path, cwd: Path, **env: str) -> Run:
    """Run a command of ``venv`` (``conveyor``, ``python``) in ``cwd``."""

    def run(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        program = str(venv / "bin" / argv[0])
        return subprocess.run([program, *argv[1:]], cwd=cwd, capture_output=True, text=True,
                              timeout=timeout, env=_clean_env(**env), check=False)

    return run


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"{done.args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def python_checks(run: Run, code: str) -> None:
    ok(run("python", "-c", code))


def not_importable(packages: set[str]) -> str:
    """Python that asserts none of ``packages`` can be imported in that venv."""
    return (f"import importlib.util\n"
            f"found = [p for p in {sorted(packages)!r} if importlib.util.find_spec(p)]\n"
            f"assert not found, f'installed by this extra but not its own: {{found}}'\n")


TASKS = '''
from conveyor import Conveyor

app = Conveyor()


@app.task(queue="default")
def add(a: int, b: int) -> int:
    return a + b
'''


# -- the built artefacts -----------------------------------------------------------------


def test_the_wheel_and_sdist_hold_every_file_of_the_package(dist: dict[str, Path]) -> None:
    """Every tracked file under src/conveyor (SQL, migrations, templates, static files,
    py.typed) is in the wheel and the sdist; the wheel's version is the one source."""
    tracked = _check(["git", "ls-files", "src/conveyor"], cwd=ROOT).split()
    expected = {path.removeprefix("src/") for path in tracked}
    assert any(name.endswith(".sql") for name in expected)
    with zipfile.ZipFile(dist["wheel"]) as wheel:
        names = set(wheel.namelist())
        metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
        headers = wheel.read(metadata).decode()
    assert sorted(expected - names) == [], "left out of the wheel"
    assert f"\nVersion: {__version__}\n" in headers
    assert dist["wheel"].name.startswith(f"conveyor-{__version__}-")
    for extra in EXTRA_PACKAGES:
        assert f"Provides-Extra: {extra}\n" in headers
    requires = [line for line in headers.splitlines() if line.startswith("Requires-Dist:")]
    core = [line for line in requires if "extra ==" not in line]
    assert not [line for line in core if "psycopg" in line], core  # psycopg is an extra
    with tarfile.open(dist["sdist"]) as sdist:
        members = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert sorted({f"src/{name}" for name in expected} - members) == [], "left out of the sdist"
    assert {"README.md", "CHANGELOG.md", "pyproject.toml"} <= members


# -- no extras: the core -------------------------------------------------------------------


def test_the_core_install_runs_every_cli_step_on_sqlite(make_venv: Callable[..., Path],
                                                       tmp_path: Path) -> None:
    venv = make_venv("core")
    (tmp_path / "tasks.py").write_text(TASKS)
    run = runner(venv, tmp_path, CONVEYOR_URL="sqlite:///jobs.db", CONVEYOR_APP="tasks:app")
    assert ok(run("conveyor", "--version")).strip() == f"conveyor, version {__version__}"
    assert "worker" in ok(run("conveyor", "--help"))
    enqueued = json.loads(ok(run("conveyor", "enqueue", "add", "--args", "[2, 3]", "--json")))
    ok(run("conveyor", "worker", "--burst"))
    jobs = json.loads(ok(run("conveyor", "jobs", "list", "--json")))
    assert [(job["id"], job["state"], job["result"]) for job in jobs] == [
        (enqueued["id"], "completed", 5)]
    assert "completed" in ok(run("conveyor", "status"))
    ok(run("conveyor", "prune", "--dry-run"))
    ok(run("conveyor", "migrate"))

    # A command that needs an extra: exit 2, one line naming it.
    dashboard = run("conveyor", "dashboard", "--port", "0")
    assert dashboard.returncode == 2, dashboard
    assert dashboard.stderr.strip().count("\n") == 0, dashboard.stderr
    assert "pip install 'conveyor[web]'" in dashboard.stderr
    # A PostgreSQL URL without the postgres extra: exit 3, one line naming it.
    pg = run("conveyor", "jobs", "list", "--url", "postgresql://127.0.0.1:1/none")
    assert pg.returncode == 3, pg
    assert pg.stderr.strip().count("\n") == 0, pg.stderr
    assert "pip install 'conveyor[postgres]'" in pg.stderr


def test_the_core_install_imports_no_extra_and_names_the_postgres_extra(
        make_venv: Callable[..., Path], tmp_path: Path) -> None:
    run = runner(make_venv("core"), tmp_path)
    python_checks(run, textwrap.dedent(f"""
        import sys
        import conveyor
        assert conveyor.__file__.startswith(sys.prefix), conveyor.__file__  # the wheel's
        assert conveyor.__version__ == {__version__!r}
        loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r}))
        assert not loaded, loaded
        from conveyor import Conveyor, DatabaseUnavailableError
        try:
            Conveyor("postgresql://127.0.0.1:1/none")
        except DatabaseUnavailableError as exc:
            assert str(exc) == ("PostgreSQL URLs need the psycopg driver, which is not "
                                "installed: pip install 'conveyor[postgres]'"), exc
        else:
            raise AssertionError("a PostgreSQL URL without psycopg did not fail")
    """) + not_importable(ALL_EXTRA_PACKAGES))


def test_every_core_module_imports_without_an_extra(make_venv: Callable[..., Path],
                                                   tmp_path: Path) -> None:
    """Walk the installed package: a module fails to import only for an extra's package
    (or pytest, for the pytest plugin), never for one of the core's own."""
    run = runner(make_venv("core"), tmp_path)
    out = ok(run("python", "-c", textwrap.dedent("""
        import importlib, json, pkgutil, conveyor
        failed = {}
        for info in pkgutil.walk_packages(conveyor.__path__, "conveyor."):
            if ".migrations" in info.name or info.name.endswith("__main__"):
                continue
            try:
                importlib.import_module(info.name)
            except ImportError as exc:
                failed[info.name] = [exc.name, str(exc)]
        print(json.dumps(failed))
    """)))
    failed: dict[str, tuple[str | None, str]] = {k: (v[0], v[1]) for k, v in json.loads(out).items()}
    allowed = ALL_EXTRA_PACKAGES | {"pytest"}
    wrong = {module: why for module, (name, why) in failed.items()
             if (name or "").split(".")[0] not in allowed and "pip install 'conveyor[" not in why}
    assert wrong == {}
    core = [m for m in failed if m.startswith(("conveyor.cli", "conveyor._", "conveyor.testing."))
            and not m.startswith("conveyor._storage.postgres")
            and m != "conveyor.testing.pytest_plugin"]
    assert core == [], {m: failed[m] for m in core}


# -- each extra alone ------------------------------------------------------------------------


def _alone(extra: str) -> str:
    return not_importable(ALL_EXTRA_PACKAGES - EXTRA_PACKAGES[extra])


@pytest.fixture
def pg_database() -> Iterator[str]:
    """A new, empty PostgreSQL database (nothing migrated), dropped afterwards."""
    found = _pg.get()
    if found.admin_url is None:
        if found.fatal or _pg.required():
            pytest.fail(f"PostgreSQL is needed: {found.reason}", pytrace=False)
        pytest.skip(f"PostgreSQL is needed: {found.reason}")
    with _pg.scratch_database(found.admin_url, "conveyor_pkg") as url:
        yield url


def test_postgres_extra_migrates_and_runs_jobs(make_venv: Callable[..., Path], tmp_path: Path,
                                              pg_database: str) -> None:
    """The migrations ship in the wheel: an empty database is migrated by the installed
    CLI, then a job goes through it."""
    (tmp_path / "tasks.py").write_text(TASKS)
    run = runner(make_venv("postgres", "postgres"), tmp_path, CONVEYOR_URL=pg_database,
                 CONVEYOR_APP="tasks:app")
    python_checks(run, "import sys, conveyor\nassert 'psycopg' not in sys.modules\n"
                  + _alone("postgres"))
    before = run("conveyor", "jobs", "list")
    assert before.returncode == 4, before  # not migrated yet
    assert "applied" in ok(run("conveyor", "migrate")).lower()
    ok(run("conveyor", "enqueue", "add", "--args", "[20, 22]"))
    ok(run("conveyor", "worker", "--burst"))
    jobs = json.loads(ok(run("conveyor", "jobs", "list", "--json")))
    assert [(job["state"], job["result"]) for job in jobs] == [("completed", 42)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.read().decode()


def test_web_extra_migrates_sqlite_and_serves_the_dashboard(make_venv: Callable[..., Path],
                                                           tmp_path: Path) -> None:
    """``conveyor dashboard`` from the wheel: a page from the shipped templates, a
    shipped static file and /metrics, on a SQLite file the installed migrations made."""
    run = runner(make_venv("web", "web"), tmp_path)
    python_checks(run, "from conveyor.web import create_app\n" + _alone("web"))
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    ok(run("conveyor", "migrate", "--url", url))
    port = _free_port()
    argv = [str(make_venv("web") / "bin" / "conveyor"), "dashboard", "--url", url,
            "--port", str(port), "--poll", "0"]
    server = subprocess.Popen(argv, cwd=tmp_path, env=_clean_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                status, _ = _get(f"{base}/healthz")
                break
            except OSError:
                assert server.poll() is None, server.communicate()[0]
                assert time.monotonic() < deadline, "the dashboard did not answer in 60 s"
                time.sleep(0.1)
        assert status == 200
        status, page = _get(f"{base}/")
        assert status == 200 and "<html" in page.lower()
        statics = re.findall(r'(?:href|src)="([^"]*/static/[^"]+)"', page)
        assert statics, page[:2000]
        for path in statics:
            status, _ = _get(base + path if path.startswith("/") else f"{base}/{path}")
            assert status == 200, path
        status, metrics = _get(f"{base}/metrics")
        assert status == 200 and "conveyor_" in metrics
    finally:
        server.terminate()
        server.wait(timeout=30)


EXTRA_CHECKS: dict[str, str] = {
    "prometheus": """
        import asyncio, sys
        from prometheus_client import CollectorRegistry, generate_latest
        from conveyor import Conveyor
        from conveyor.contrib.prometheus import ConveyorCollector
        app = Conveyor("sqlite:///jobs.db")
        app.migrate()
        registry = CollectorRegistry()
        registry.register(ConveyorCollector(app))
        assert b"conveyor_database_up 1.0" in generate_latest(registry), generate_latest(registry)
        app.close()
        assert "starlette" not in sys.modules and "jinja2" not in sys.modules
    """,
    "sentry": """
        import sys
        from conveyor.contrib.sentry import install
        assert callable(install) and "sentry_sdk" in sys.modules
    """,
    "otel": """
        from conveyor import Conveyor
        from conveyor.otel import instrument
        app = Conveyor("sqlite:///jobs.db")
        instrument(app)
        app.close()
    """,
    "asgi": """
        from conveyor.contrib.asgi import conveyor_lifespan, mount_dashboard
    """,
    "fastapi": """
        import fastapi
        from conveyor.contrib.asgi import conveyor_lifespan, mount_dashboard
    """,
    "sqlalchemy": """
        import sqlalchemy
        from sqlalchemy.orm import Session
        from conveyor import Conveyor
        app = Conveyor("sqlite:///jobs.db")
        app.migrate()

        @app.task
        def noop() -> None: ...

        engine = sqlalchemy.create_engine("sqlite:///jobs.db")
        with Session(engine) as session:
            job = noop.options(connection=session).enqueue()
            session.rollback()  # the job was written in the session's transaction
        assert app.list_jobs() == []
        with Session(engine) as session:
            job = noop.options(connection=session).enqueue()
            session.commit()
        assert app.get_job(job.id).state == "available"
        app.close()
    """,
    "encryption": """
        import os
        from cryptography.fernet import Fernet
        os.environ["CONVEYOR_ENCRYPTION_KEYS"] = Fernet.generate_key().decode()
        from conveyor import Conveyor
        app = Conveyor("sqlite:///jobs.db")

        @app.task(encrypt=True)
        def secret(card: str) -> str:
            return card[-4:]

        job = secret.enqueue("4111111111111111")
        assert "4111111111111111" not in repr(app.get_job(job.id).args)
        app.drain()
        assert app.get_job(job.id).result == "1111"
        app.close()
    """,
}


@pytest.mark.parametrize("extra", sorted(EXTRA_CHECKS))
def test_each_extra_alone_imports_only_what_it_needs(make_venv: Callable[..., Path],
                                                    tmp_path: Path, extra: str) -> None:
    run = runner(make_venv(extra, extra), tmp_path)
    python_checks(run, textwrap.dedent(EXTRA_CHECKS[extra]) + _alone(extra))


def _django_python() -> str:
    found = subprocess.run(["make", "-s", "--no-print-directory", "print-django-python"],
                           cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    python = found.stdout.strip()
    if found.returncode != 0 or not python:
        _missing("no Python >= 3.12 for the django extra (the Makefile's DJANGO_PYTHON)")
    return python


def test_django_extra_alone_runs_its_management_command(make_venv: Callable[..., Path],
                                                        tmp_path: Path) -> None:
    """``manage.py conveyor_worker`` with only the django extra (it once failed at import)."""
    venv = make_venv("django", "django", python=_django_python())
    (tmp_path / "settings.py").write_text(textwrap.dedent(f"""
        SECRET_KEY = "package-test"
        INSTALLED_APPS = ["conveyor.contrib.django"]
        DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3",
                                  "NAME": {str(tmp_path / 'django.db')!r}}}}}
        TASKS = {{"default": {{"BACKEND": "conveyor.contrib.django.ConveyorBackend",
                              "QUEUES": [], "OPTIONS": {{"URL": {f"sqlite:///{tmp_path}/jobs.db"!r}}}}}}}
        USE_TZ = True
    """))
    run = runner(venv, tmp_path, DJANGO_SETTINGS_MODULE="settings", PYTHONPATH=str(tmp_path))
    python_checks(run, "import django\ndjango.setup()\nimport conveyor.contrib.django.backend\n"
                  + _alone("django"))
    assert "--burst" in ok(run("python", "-m", "django", "conveyor_worker", "--help"))


def test_the_pytest_plugin_runs_a_users_tests_without_an_extra(make_venv: Callable[..., Path],
                                                               tmp_path: Path) -> None:
    """pytest loads the plugin by itself wherever Conveyor is installed: on a core install
    (no psycopg) a user's suite runs on SQLite with the ``conveyor_app`` fixture."""
    venv = make_venv("core-pytest")
    _check([_uv(), "pip", "install", "-q", "--python", str(venv / "bin" / "python"), "pytest"])
    (tmp_path / "tasks.py").write_text(TASKS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nconveyor_app = tasks:app\npythonpath = .\n")
    (tmp_path / "test_tasks.py").write_text(textwrap.dedent("""
        from tasks import add

        def test_add_runs(conveyor_app):
            job = add.enqueue(2, 40)
            assert len(conveyor_app.drain().completed) == 1
            assert conveyor_app.get_job(job.id).result == 42
    """))
    out = ok(runner(venv, tmp_path)("python", "-m", "pytest", "-q", "-p", "no:cacheprovider"))
    assert "1 passed" in out
