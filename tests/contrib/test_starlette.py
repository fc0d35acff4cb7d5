"""Conveyor in Starlette and FastAPI (``conveyor.contrib.asgi`` and examples/fastapi/),
served by a real uvicorn on 127.0.0.1, on both backends.

The lifespan opens the app before the host's startup and closes every connection after;
the in-process worker runs jobs that requests enqueued (async and sync handlers) and is
drained at shutdown; the dashboard answers under its mount prefix behind the host's auth
(401 without, 200 with, its actions work, CSRF still checked); bad input is a 4xx and
stores nothing."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import re
import sqlite3
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import psycopg
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from conveyor import Conveyor, JobState, WorkerConfig
from conveyor.contrib.asgi import conveyor_lifespan, mount_dashboard

from ..conftest import wait_for

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fastapi" / "app.py"
PASSWORD = "a-long-dashboard-password"
FAST = WorkerConfig(queues={"default": 4, "mail": 2}, lease_ttl=5.0, heartbeat_interval=0.2,
                    stage_interval=0.05, shutdown_timeout=10.0)
TOKEN = re.compile(r'name="csrf_token" (?:value|content)="([0-9a-f]{64})"')


class Served:
    """uvicorn serving ``asgi`` on 127.0.0.1 on a thread (lifespan on); no signals."""

    def __init__(self, asgi: Any) -> None:
        config = uvicorn.Config(asgi, host="127.0.0.1", port=0, log_level="warning",
                                lifespan="on", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="test-uvicorn", daemon=True)

    def start(self) -> str:
        self.thread.start()
        wait_for(lambda: self.server.started or not self.thread.is_alive(), timeout=20,
                 message="uvicorn to start or give up")
        if not self.server.started:
            raise RuntimeError("the server did not start (its lifespan failed)")
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def stop(self, timeout: float = 30) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the server did not shut down"


@contextlib.contextmanager
def served(asgi: Any) -> Iterator[httpx.Client]:
    server = Served(asgi)
    base = server.start()
    try:
        with httpx.Client(base_url=base, timeout=10) as client:
            yield client
    finally:
        server.stop()


def load_example(db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ModuleType:
    """A fresh copy of examples/fastapi/app.py on ``db_url``."""
    monkeypatch.setenv("CONVEYOR_URL", db_url)
    monkeypatch.chdir(tmp_path)
    spec = importlib.util.spec_from_file_location(f"example_fastapi_{id(tmp_path)}", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # pydantic resolves names there
    spec.loader.exec_module(module)
    return module


def other_connections(db_url: str, before: frozenset[threading.Thread] = frozenset()) -> int:
    """Connections to the test database other than this check's own (PostgreSQL), or
    live threads of SQLite storages not in ``before`` (SQLite: the threads are the
    process's, and a test run earlier may have left its own)."""
    if db_url.startswith("sqlite"):
        return sum(t.name == "conveyor-sqlite" and t not in before
                   for t in threading.enumerate())
    with psycopg.connect(db_url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                           "current_database() AND pid <> pg_backend_pid()").fetchone()
        return int(row[0]) if row else 0


def stored_jobs(db_url: str) -> int:
    """Jobs in the database, read with the driver (no app, no connection left open)."""
    if db_url.startswith("sqlite"):
        with contextlib.closing(sqlite3.connect(db_url.removeprefix("sqlite:///"))) as conn:
            return int(conn.execute("SELECT count(*) FROM conveyor_jobs_all").fetchone()[0])
    with psycopg.connect(db_url) as pg:
        row = pg.execute("SELECT count(*) FROM conveyor_jobs_all").fetchone()
        return int(row[0]) if row else 0


# -- lifespan ---------------------------------------------------------------------------------


def test_lifespan_opens_before_the_host_startup_and_closes_after(db_url: str) -> None:
    app = Conveyor(db_url)

    @app.task
    def ping() -> str:
        return "pong"

    seen: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def host_lifespan(_: Starlette) -> AsyncIterator[dict[str, int]]:
        job = await ping.enqueue_async()  # Conveyor is open during the host's startup
        yield {"boot_job": job.id}
        seen["at_shutdown"] = (await app.count_jobs_async())["available"]  # still open

    async def boot(request: Request) -> Response:
        return JSONResponse({"boot_job": request.state.boot_job})

    def sync_enqueue(request: Request) -> Response:  # a sync endpoint: the sync API
        return JSONResponse({"id": ping.enqueue().id})

    host = Starlette(routes=[Route("/boot", boot), Route("/sync", sync_enqueue, methods=["POST"])],
                     lifespan=conveyor_lifespan(app, lifespan=host_lifespan))
    before = frozenset(threading.enumerate())
    assert other_connections(db_url, before) == 0
    with served(host) as client:
        boot_job = client.get("/boot").json()["boot_job"]
        assert client.post("/sync").json()["id"] > boot_job
        assert other_connections(db_url, before) > 0
    assert seen["at_shutdown"] == 2
    wait_for(lambda: other_connections(db_url, before) == 0, message="every connection closed")
    assert stored_jobs(db_url) == 2


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # uvicorn exits
def test_a_dead_database_fails_the_startup(db_url: str, tmp_path: Path) -> None:
    dead = (f"sqlite:///{tmp_path / 'no-such-dir' / 'jobs.db'}" if db_url.startswith("sqlite")
            else "postgresql://postgres@127.0.0.1:1/nothing?connect_timeout=2")
    app = Conveyor(dead)
    server = Served(Starlette(lifespan=conveyor_lifespan(app, worker=FAST)))
    with pytest.raises(RuntimeError, match="did not start"):
        server.start()
    server.thread.join(10)
    assert not [t for t in threading.enumerate() if t.name == "conveyor-worker"]


def test_worker_argument_is_checked() -> None:
    app = Conveyor("sqlite:///:memory:")
    with pytest.raises(TypeError, match="WorkerConfig"):
        conveyor_lifespan(app, worker={"default": 1})  # type: ignore[arg-type]


# -- the in-process worker --------------------------------------------------------------------


def test_worker_runs_jobs_enqueued_by_async_and_sync_handlers(
    db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    example = load_example(db_url, monkeypatch, tmp_path)
    api = example.create_api(example.queue, worker=FAST, dashboard_password=PASSWORD)
    with served(api) as client:
        signup = client.post("/signups", json={"email": "ada@example.com", "name": "Ada"})
        report = client.post("/reports", json={"kind": "daily", "note": "hello"})
        assert (signup.status_code, report.status_code) == (202, 202)

        def state(job_id: int) -> dict[str, Any]:
            return dict(client.get(f"/jobs/{job_id}").json())

        done = wait_for(lambda: (s := state(signup.json()["job_id"]))["state"] == "completed" and s)
        assert done["result"] == "welcome mail sent to Ada <ada@example.com>"
        done = wait_for(lambda: (s := state(report.json()["job_id"]))["state"] == "completed" and s)
        assert done["result"] == {"kind": "daily", "note_chars": 5}
        assert client.get("/jobs/999999").status_code == 404


shutting_down = threading.Event()


def drain_app(db_url: str, shutdown_timeout: float
              ) -> tuple[Conveyor, Starlette, threading.Event, threading.Event]:
    """A host whose jobs hold their worker: ``hold`` until ``release`` is set,
    ``forever`` until cancelled; ``started`` is set when one runs."""
    app = Conveyor(db_url)
    release, started = threading.Event(), threading.Event()
    shutting_down.clear()

    @app.task
    def hold() -> str:
        started.set()
        release.wait(60)
        return "finished"

    @app.task
    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    async def enqueue(request: Request) -> Response:
        task = hold if request.path_params["name"] == "hold" else forever
        return JSONResponse({"id": (await task.enqueue_async()).id})

    @contextlib.asynccontextmanager
    async def host_lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        shutting_down.set()  # the host's shutdown runs before the worker is stopped

    config = WorkerConfig(queues={"default": 2}, lease_ttl=5.0, heartbeat_interval=0.2,
                          stage_interval=0.05, shutdown_timeout=shutdown_timeout)
    host = Starlette(routes=[Route("/enqueue/{name}", enqueue, methods=["POST"])],
                     lifespan=conveyor_lifespan(app, worker=config, lifespan=host_lifespan))
    return app, host, release, started


def test_shutdown_drains_a_running_job(db_url: str) -> None:
    """The server's shutdown waits for the running job (it completes, result stored)."""
    app, host, release, started = drain_app(db_url, shutdown_timeout=30)
    server = Served(host)
    base = server.start()
    job_id = httpx.post(f"{base}/enqueue/hold").json()["id"]
    assert started.wait(10), "the job never started"
    server.server.should_exit = True
    assert shutting_down.wait(10), "the shutdown never began"
    server.thread.join(1.0)
    assert server.thread.is_alive(), "the server exited while its worker still ran a job"
    release.set()
    server.stop()
    try:
        job = app.get_job(job_id)
        assert job is not None and job.state is JobState.COMPLETED and job.result == "finished"
    finally:
        app.close()


def test_shutdown_timeout_gives_a_stuck_job_back(db_url: str) -> None:
    app, host, _, started = drain_app(db_url, shutdown_timeout=0.3)
    with served(host) as client:
        job_id = client.post("/enqueue/forever").json()["id"]
        assert started.wait(10), "the job never started"
    try:
        job = app.get_job(job_id)
        assert job is not None and job.state is JobState.AVAILABLE, job
    finally:
        app.close()


# -- the dashboard behind the host's authentication -------------------------------------------


def test_dashboard_behind_fastapi_basic_auth(
    db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    example = load_example(db_url, monkeypatch, tmp_path)
    api = example.create_api(example.queue, worker=False, dashboard_password=PASSWORD)
    with served(api) as client:
        job_id = client.post("/signups", json={"email": "a@b.co", "name": "A"}).json()["job_id"]
        anonymous = client.get("/conveyor/")
        assert anonymous.status_code == 401
        assert anonymous.headers["www-authenticate"].startswith("Basic")
        assert client.get("/conveyor/", auth=("admin", "wrong")).status_code == 401
        assert client.get(f"/conveyor/jobs/{job_id}").status_code == 401
        assert client.get("/conveyor/healthz").status_code == 200  # says only ok

        auth = ("admin", PASSWORD)
        page = client.get(f"/conveyor/jobs/{job_id}", auth=auth)
        assert page.status_code == 200
        assert 'href="/conveyor/static/app.css' in page.text and 'href="/conveyor/jobs' in page.text
        assert f'action="/conveyor/jobs/{job_id}/cancel"' in page.text
        assert client.get("/conveyor/static/app.css", auth=auth).status_code == 200
        token = TOKEN.search(page.text)
        assert token is not None

        forged = client.post(f"/conveyor/jobs/{job_id}/cancel", auth=auth,
                             data={"csrf_token": "0" * 64})
        assert forged.status_code == 403  # the dashboard's CSRF check still holds
        cross_site = client.post(f"/conveyor/jobs/{job_id}/cancel", auth=auth,
                                 data={"csrf_token": token.group(1)},
                                 headers={"origin": "https://evil.example"})
        assert cross_site.status_code == 403  # and its Origin check
        cancel = client.post(f"/conveyor/jobs/{job_id}/cancel", auth=auth,
                             data={"csrf_token": token.group(1)}, headers={"origin": str(client.base_url)})
        assert cancel.status_code == 303
        assert cancel.headers["location"].startswith(f"/conveyor/jobs/{job_id}")
        assert client.get(f"/jobs/{job_id}").json()["state"] == "cancelled"


@pytest.mark.parametrize("answer, status", [(False, 403), (None, 403), ("nonsense", 403)])
def test_authorize_answers_that_grant_nothing(db_url: str, answer: object, status: int) -> None:
    app = Conveyor(db_url)
    host = Starlette(lifespan=conveyor_lifespan(app))
    mount_dashboard(host, "/ops", app, authorize=lambda request: answer)  # type: ignore[arg-type, return-value]
    with served(host) as client:
        assert client.get("/ops/").status_code == status
        assert client.get("/ops/jobs").status_code == status


def test_starlette_read_role_and_redirect_to_login(db_url: str) -> None:
    """A plain Starlette host with a session-like cookie: no cookie -> redirect to its
    login page; "read" shows pages but refuses actions."""
    app = Conveyor(db_url)

    @app.task
    def noop() -> None: ...

    async def authorize(request: Request) -> bool | str | Response:
        user = request.cookies.get("user")
        if user is None:
            return RedirectResponse("/login", status_code=303)
        return True if user == "admin" else "read"

    host = Starlette(lifespan=conveyor_lifespan(app))
    mount_dashboard(host, "/ops", app, authorize=authorize)  # type: ignore[arg-type]
    with served(host) as client:
        job = noop.enqueue()
        assert client.get("/ops/").headers["location"] == "/login"
        client.cookies.set("user", "admin")
        token = TOKEN.search(client.get(f"/ops/jobs/{job.id}").text)
        assert token is not None
        client.cookies.set("user", "viewer")
        page = client.get(f"/ops/jobs/{job.id}")
        assert page.status_code == 200 and "/cancel" not in page.text
        refused = client.post(f"/ops/jobs/{job.id}/cancel", data={"csrf_token": token.group(1)})
        assert refused.status_code == 403
        client.cookies.set("user", "admin")
        done = client.post(f"/ops/jobs/{job.id}/cancel", data={"csrf_token": token.group(1)})
        assert done.status_code == 303
    try:
        assert app.get_job(job.id).state is JobState.CANCELLED  # type: ignore[union-attr]
    finally:
        app.close()


def test_mount_dashboard_checks_its_arguments() -> None:
    app = Conveyor("sqlite:///:memory:")
    host = Starlette()
    with pytest.raises(TypeError, match="authorize"):
        mount_dashboard(host, "/ops", app, authorize="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mount path"):
        mount_dashboard(host, "ops/", app, authorize=lambda r: True)
    with pytest.raises(TypeError, match="access"):
        mount_dashboard(host, "/ops", app, authorize=lambda r: True, access=lambda r: "write")


# -- bad input --------------------------------------------------------------------------------


def test_bad_input_is_a_clear_4xx_and_stores_nothing(
    db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    example = load_example(db_url, monkeypatch, tmp_path)
    api = example.create_api(example.queue, worker=False, dashboard_password=PASSWORD)
    with served(api) as client:
        bad = [
            ("/signups", {"email": "not-an-email", "name": "A"}, 422),
            ("/signups", {"email": "a@b.co"}, 422),
            ("/signups", {"email": ["a@b.co"], "name": "A"}, 422),
            ("/reports", {"kind": "hourly"}, 422),
            ("/reports", {"kind": "daily", "note": "x" * 100_000}, 413),
        ]
        for path, body, status in bad:
            response = client.post(path, json=body)
            assert response.status_code == status, (path, body, response.text)
            assert response.json()["detail"]
        assert "payload" in client.post("/reports", json=bad[-1][1]).json()["detail"]
        assert client.post("/signups", content=b"{not json",
                           headers={"content-type": "application/json"}).status_code == 422
    assert stored_jobs(db_url) == 0
