"""Routing across real `conveyor worker` processes sharing one database, on both
backends: a worker with --label gpu=a100 --tasks train and one with --tasks
mail.send,resize each claim only their jobs; what no worker can run stays, and
explain_job says why. Every wait is a condition with a deadline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor, JobState

from ._runtime_util import stop_processes
from .apps import routing_app
from .conftest import WaitFor
from .test_cli import invoke

ROOT = Path(__file__).resolve().parent.parent
APP = "tests.apps.routing_app:app"
WORKER_ARGS = ("--heartbeat-interval", "0.3", "--lease-ttl", "3", "--shutdown-timeout", "2",
               "--log-level", "warning", "--all-queues")


class Workers:
    """`conveyor worker` processes on one database, each stopped by its own pid."""

    def __init__(self, db_url: str, logs: Path) -> None:
        self.db_url, self.logs = db_url, logs
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, "CONVEYOR_URL": self.db_url,
               "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
        env.pop("CONVEYOR_WORKER_LABELS", None)
        cmd = [sys.executable, "-m", "conveyor", "worker", APP, *WORKER_ARGS, *args]
        log = open(self.logs / f"worker-{len(self.procs)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.procs.append(proc)
        return proc

    def output(self) -> str:
        return "\n".join((self.logs / f"worker-{i}.log").read_text(errors="replace")
                         for i in range(len(self.procs)))

    def stop_all(self) -> None:
        stop_processes(self.procs, 15)


@pytest.fixture
def workers(db_url: str, tmp_path: Path) -> Iterator[Workers]:
    w = Workers(db_url, tmp_path)
    try:
        yield w
    finally:
        w.stop_all()


@pytest.fixture
def routed(db_url: str) -> Iterator[Conveyor]:
    app = routing_app.build(db_url)
    try:
        yield app
    finally:
        app.close()


def test_two_workers_claim_only_what_their_labels_and_tasks_allow(
        routed: Conveyor, workers: Workers, wait_for: WaitFor) -> None:
    tasks = routed.tasks
    trains = [tasks["train"].enqueue(i) for i in range(8)]
    mails = [tasks["mail.send"].enqueue(i) for i in range(8)]
    resizes = [tasks["resize"].enqueue(i) for i in range(8)]
    h100 = tasks["train"].options(requires={"gpu": "h100"}).enqueue(99)
    report = tasks["report"].enqueue(1)
    assert {j.queue for j in mails} == {"mail"}  # routed by name
    gpu = workers.start("--label", "gpu=a100", "--tasks", "train")
    cpu = workers.start("--tasks", "mail.send,resize")
    mine = trains + mails + resizes

    def all_done() -> bool:
        for p in (gpu, cpu):
            assert p.poll() is None, workers.output()
        return all(routed.get_job(j.id).state == JobState.COMPLETED for j in mine)  # type: ignore[union-attr]

    wait_for(all_done, timeout=90, interval=0.1, message="the routed jobs to complete")
    ran = {j.id: routed.get_job(j.id).result for j in mine}  # type: ignore[union-attr]
    assert {ran[j.id]["pid"] for j in trains} == {gpu.pid}
    assert {ran[j.id]["pid"] for j in mails + resizes} == {cpu.pid}
    assert {ran[j.id]["labels"]["gpu"] for j in trains} == {"a100"}
    nodes = {n.pid: n for n in routed.list_nodes()}
    assert nodes[gpu.pid].serves == ["train"] and nodes[cpu.pid].serves == ["mail.send", "resize"]
    assert {ran[j.id]["node"] for j in trains} == {nodes[gpu.pid].id}
    status = json.loads(invoke("status", "--json", "--app", APP, "--url", routed.url).stdout)
    served = {w["hostname"] + str(w["labels"]): w["tasks"] for w in status["workers"]}
    assert sorted(map(str, served.values())) == ["['mail.send', 'resize']", "['train']"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

        from conveyor.web import create_app

        with TestClient(create_app(routed), base_url="http://localhost") as client:
            page = client.get("/workers").text
    assert "(tasks train)" in page and "(tasks mail.send, resize)" in page

    # what no live worker can run stays where it is, and says why
    for job, why in ((h100, "needs gpu=h100; no live worker has it"),
                     (report, "no live worker serves task 'report'")):
        got = routed.get_job(job.id)
        assert got is not None and got.state == JobState.AVAILABLE and got.attempt == 0
        reasons = routed.explain_job(job.id).reasons
        assert any(why in r for r in reasons), reasons


def test_an_unknown_task_in_tasks_is_a_usage_error_listing_the_known_ones(
        db_url: str, workers: Workers) -> None:
    proc = workers.start("--tasks", "train,nope")
    assert proc.wait(timeout=60) == 2
    out = workers.output()
    assert "unknown task(s) 'nope'" in out
    assert "mail.send, report, resize, train" in out


@pytest.mark.parametrize(("tasks", "message"), [
    ("nope", "unknown task(s) 'nope'"),
    ("train,,mail.send,nope2", "unknown task(s) 'nope2'"),
    (",", "names no task"),
])
def test_bad_tasks_flags_exit_2_with_a_clear_message(db_url: str, tasks: str,
                                                     message: str) -> None:
    result = invoke("worker", APP, "--burst", "--tasks", tasks, "--url", db_url)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "--tasks" in result.output


def test_worker_help_documents_tasks() -> None:
    text = " ".join(invoke("worker", "--help").stdout.split())
    assert "--tasks TASK,..." in text and "the others stay for other workers" in text


def test_conveyor_enqueue_requires_labels(routed: Conveyor, db_url: str) -> None:
    out = invoke("enqueue", "resize", "--args", "[1]", "--requires", "gpu=a100",
                 "--requires", "zone=b", "--json", "--app", APP, "--url", db_url)
    assert out.exit_code == 0, out.output
    job = routed.get_job(json.loads(out.stdout)["id"])
    assert job is not None and job.requires == {"gpu": "a100", "zone": "b"}
    # without --app, a stand-in task: no requirement unless given
    out = invoke("enqueue", "train", "--args", "[1]", "--json", "--url", db_url)
    job = routed.get_job(json.loads(out.stdout)["id"])
    assert job is not None and job.requires is None
    for bad, message in ((["--requires", "gpu"], "expected KEY=VALUE"),
                         (["--requires", "bad key=1"], "label key 'bad key'")):
        out = invoke("enqueue", "resize", "--args", "[1]", *bad, "--url", db_url)
        assert out.exit_code == 2 and message in out.output, out.output


def test_a_stand_in_task_takes_the_routed_queue(db_url: str) -> None:
    from conveyor._app.named import task_by_name

    app = Conveyor(db_url, routes={"mail.*": "mail"})
    try:
        assert task_by_name(app, "mail.send", known=False).defaults.queue == "mail"
        assert task_by_name(app, "other", known=False).defaults.queue == "default"
    finally:
        app.close()
