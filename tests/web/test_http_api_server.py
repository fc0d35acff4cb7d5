"""The HTTP API on a real server (uvicorn on a free port): a long poll woken when a
worker finishes the job, the Node.js client of docs/http-api.md (run when ``node`` is
installed; skipped loudly otherwise), and a dead database answered with 503 JSON."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conveyor import Conveyor
from conveyor.web import create_app

from .._runtime_util import all_final, run_worker_until
from ._api import READ, TOKENS, WRITE, auth, client_for, make_app
from ._server import serve

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "http-api" / "enqueue.mjs"
NODE = shutil.which("node")
#: In the skip reason: tests/web/conftest.py shouts about these skips at the end.
NODE_MISSING = "NODE.JS CLIENT NOT RUN"
ENV_REQUIRE_NODE = "CONVEYOR_REQUIRE_NODE"


@pytest.fixture
def served(db_url: str) -> Iterator[tuple[str, Conveyor]]:
    """The dashboard's app with the API on a real server, and a second app (a worker's)
    on the same database."""
    app, _ = make_app(db_url)
    worker_app, _ = make_app(db_url)
    try:
        with serve(create_app(app, api_tokens=TOKENS)) as base:
            yield base, worker_app
    finally:
        worker_app.close()
        app.close()


def work_until_final(app: Conveyor) -> None:
    asyncio.run(run_worker_until(app, all_final(app), timeout=60))


def wait_until(predicate: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def test_a_long_poll_is_answered_when_a_worker_finishes_the_job(
        served: tuple[str, Conveyor]) -> None:
    base, worker_app = served
    with httpx.Client(base_url=base, headers=auth(), timeout=90) as client:
        made = client.post("/api/v1/jobs", json={"task": "resize", "args": ["/a.png"]})
        assert made.status_code == 201, made.text
        job_id = made.json()["id"]
        answers: list[httpx.Response] = []
        poll = threading.Thread(target=lambda: answers.append(
            client.get(f"/api/v1/jobs/{job_id}/wait", params={"timeout": 50})))
        started = time.monotonic()
        poll.start()
        work_until_final(worker_app)
        poll.join(60)
        took = time.monotonic() - started
        assert answers and answers[0].status_code == 200, answers
        done = answers[0].json()
        assert done["state"] == "completed" and done["result"] == {"width": 800}
        assert took < 45  # woken, not timed out
        assert "set-cookie" not in answers[0].headers
        # read-only tokens read; the real server refuses a foreign Host
        assert client.get(f"/api/v1/jobs/{job_id}", headers=auth(READ)).status_code == 200
        assert client.get("/api/v1/jobs", headers={"host": "evil.example"}).status_code == 421


def _node(*args: str, base: str, token: str = WRITE) -> subprocess.CompletedProcess[str]:
    assert NODE is not None
    env = {"PATH": os.environ.get("PATH", ""), "CONVEYOR_API_URL": base,
           "CONVEYOR_API_TOKEN": token}
    return subprocess.run([NODE, str(EXAMPLE), *args], env=env, capture_output=True,
                          text=True, timeout=120)


def _require_node() -> None:
    if NODE is None:
        if os.environ.get(ENV_REQUIRE_NODE) == "1":
            pytest.fail(f"node not found and {ENV_REQUIRE_NODE}=1")
        pytest.skip(f"{NODE_MISSING}: node (Node.js 18+) is not installed; "
                    f"{ENV_REQUIRE_NODE}=1 makes this a failure")


def test_the_node_client_enqueues_a_job(served: tuple[str, Conveyor]) -> None:
    _require_node()
    base, worker_app = served
    ran = _node("send_email", '["ada@example.com"]', '{"subject": "Welcome"}', base=base)
    assert ran.returncode == 0, ran.stderr
    printed = json.loads(ran.stdout)
    stored = worker_app.get_job(printed["id"])
    assert stored is not None and stored.task == "send_email"
    assert stored.args == ["ada@example.com"] and stored.kwargs == {"subject": "Welcome"}
    refused = _node("send_emails", base=base)
    assert refused.returncode == 1 and "unknown_task" in refused.stderr
    read_only = _node("send_email", '["a", "b"]', base=base, token=READ)
    assert read_only.returncode == 1 and "403 forbidden" in read_only.stderr
    assert len(worker_app.list_jobs()) == 1


def test_the_node_client_waits_for_the_result(served: tuple[str, Conveyor]) -> None:
    _require_node()
    base, worker_app = served
    assert NODE is not None
    env = {"PATH": os.environ.get("PATH", ""), "CONVEYOR_API_URL": base,
           "CONVEYOR_API_TOKEN": WRITE}
    with subprocess.Popen([NODE, str(EXAMPLE), "resize", '["/a.png"]', '{"width": 64}',
                           "--wait", "50"], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as node:
        wait_until(lambda: worker_app.list_jobs())
        work_until_final(worker_app)
        out, err = node.communicate(timeout=60)
    assert node.returncode == 0, err
    done = json.loads(out)
    assert done["state"] == "completed" and done["result"] == {"width": 64}


# -- a dead database ----------------------------------------------------------------------------

CALLS = [("POST", "/jobs", {"task": "resize", "args": ["/a"]}),
         ("POST", "/jobs", [{"task": "resize", "args": ["/a"]}]),
         ("GET", "/jobs", None), ("GET", "/jobs?state=failed", None), ("GET", "/jobs/1", None),
         ("GET", "/jobs/1/wait?timeout=1", None), ("POST", "/jobs/1/cancel", None),
         ("POST", "/jobs/1/retry", None), ("GET", "/queues", None),
         ("POST", "/queues/mail/pause", None), ("POST", "/queues/mail/resume", None)]
FAST_ENOUGH = 5.0


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.mark.parametrize("where", [pytest.param("postgres-closed-port",
                                                marks=pytest.mark.postgres),
                                   "sqlite-missing-directory"])
def test_a_dead_database_is_503_json_at_once(where: str, tmp_path: Path) -> None:
    url = (f"postgresql://postgres@127.0.0.1:{_closed_port()}/conveyor"
           if where.startswith("postgres") else f"sqlite:///{tmp_path / 'gone' / 'jobs.db'}")
    app, _ = make_app(url)
    try:
        with client_for(app) as client:
            for method, path, body in CALLS:
                if "state=failed" in path:
                    path = path.replace("failed", "discarded")
                started = time.monotonic()
                response = client.request(method, "/api/v1" + path, json=body, headers=auth())
                assert time.monotonic() - started < FAST_ENOUGH, path
                assert response.status_code == 503, (method, path, response.text)
                answer = response.json()
                assert answer["error"] == "database_unreachable", answer
                assert "password" not in answer["message"]
                assert response.headers["retry-after"] == "5"
            # what needs no database still answers
            assert client.get("/api/v1/openapi.json", headers=auth()).status_code == 200
            assert client.post("/api/v1/jobs", json={"task": "nope"},
                               headers=auth()).status_code == 422
    finally:
        app.close()
    assert not (tmp_path / "gone").exists()
