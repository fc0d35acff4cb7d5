"""conveyor.contrib.prometheus: the collector in a host app's registry (both backends),
the dashboard's /metrics from the same code, a dead database, and prometheus-client's
multiprocess mode beside `conveyor worker --processes 2`."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from conveyor import Conveyor
from conveyor.contrib.prometheus import ConveyorCollector

from .._runtime_util import FAST, run_worker_until

ROOT = Path(__file__).resolve().parent.parent.parent
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str | bytes) -> Samples:
    if isinstance(text, bytes):
        text = text.decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def value(found: Samples, name: str, **labels: str) -> float:
    return found[(name, tuple(sorted(labels.items())))]


def _work(app: Conveyor) -> None:
    """Three completed, one retried then discarded, one waiting in another queue."""

    @app.task(max_attempts=2, backoff=0)
    def resize(n: int) -> int:
        if n < 0:
            raise ValueError("negative")
        return n

    @app.task(queue="mail")
    async def send() -> None: ...

    for n in (1, 2, 3, -1):
        resize.enqueue(n)
    send.enqueue()

    async def run() -> None:
        try:
            config = dataclasses.replace(FAST, metrics_interval=0.05)
            await run_worker_until(app, lambda: _final(app), config)
        finally:
            await app.close_async()

    asyncio.run(run())


async def _final(app: Conveyor) -> bool:
    counts = await app.count_jobs_async(queue="default")
    return (counts["completed"], counts["discarded"]) == (3, 1)


def test_collector_in_the_host_registry(app: Conveyor) -> None:
    _work(app)
    registry = CollectorRegistry()
    requests = Counter("host_requests", "The host app's own metric.", registry=registry)
    requests.inc(2)
    registry.register(ConveyorCollector(app))
    found = samples(generate_latest(registry))

    assert value(found, "host_requests_total") == 2
    finished = "conveyor_jobs_finished_total"
    assert value(found, finished, queue="default", task="resize", outcome="completed") == 3
    assert value(found, finished, queue="default", task="resize", outcome="retried") == 1
    assert value(found, finished, queue="default", task="resize", outcome="discarded") == 1
    run = {"queue": "default", "task": "resize"}
    assert value(found, "conveyor_job_run_seconds_count", **run) == 5
    assert value(found, "conveyor_job_run_seconds_bucket", le="+Inf", **run) == 5
    assert value(found, "conveyor_job_queue_latency_seconds_count", **run) == 5
    assert value(found, "conveyor_queue_jobs", queue="mail", state="available") == 1
    assert value(found, "conveyor_workers") == 0  # the worker stopped
    assert value(found, "conveyor_database_up") == 1
    assert ("conveyor_build_info", (("version", "0.1.0"),)) in found


def test_dashboard_metrics_are_the_collectors(app: Conveyor) -> None:
    """One code path: /metrics and the collector say the same thing."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    from conveyor.web import create_app

    _work(app)
    registry = CollectorRegistry()
    registry.register(ConveyorCollector(app))
    collected = samples(generate_latest(registry))
    with TestClient(create_app(app), base_url="http://localhost") as client:
        response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert samples(response.text) == collected


def test_a_dead_database_is_a_gauge_and_describe_names_the_families() -> None:
    """The collector on a server that does not exist: registering works (``describe``
    names the families, so a second collector is refused as a duplicate), and each
    scrape answers ``conveyor_database_up 0`` instead of failing."""
    missing = Conveyor("postgresql://postgres@127.0.0.1:1/none?connect_timeout=1")
    try:
        registry = CollectorRegistry()
        collector = ConveyorCollector(missing, timeout=3)
        registry.register(collector)
        with pytest.raises(ValueError, match="Duplicated timeseries"):
            registry.register(ConveyorCollector(missing))  # describe() names the families
        found = samples(generate_latest(registry))
        assert value(found, "conveyor_database_up") == 0
        assert {name for name, _ in found} == {"conveyor_database_up", "conveyor_build_info"}
    finally:
        missing.close()


def test_scrape_from_inside_an_event_loop(app: Conveyor) -> None:
    """make_asgi_app scrapes on the server's loop: the collector still answers."""
    registry = CollectorRegistry()
    registry.register(ConveyorCollector(app))

    async def scrape() -> bytes:
        return generate_latest(registry)

    assert value(samples(asyncio.run(scrape())), "conveyor_database_up") == 1


@pytest.mark.parametrize("timeout", [0, -1, "5", True, float("nan")])
def test_bad_timeout_is_refused(app: Conveyor, timeout: Any) -> None:
    with pytest.raises(ValueError, match="timeout must be"):
        ConveyorCollector(app, timeout=timeout)


# -- multiprocess mode ---------------------------------------------------------------------

APP_MODULE = """
    import os
    import time
    from pathlib import Path

    from conveyor import Conveyor

    app = Conveyor()
    LEDGER = Path(os.environ["PROM_TEST_LEDGER"])

    @app.task(max_attempts=1)
    def step(n: int) -> int:
        # Every job waits (30 s at most) until both worker processes have started one,
        # so that the totals are surely the sum of two processes' work.
        with LEDGER.open("a") as ledger:
            ledger.write(f"{os.getpid()}\\n")
        deadline = time.monotonic() + 30
        while len(set(LEDGER.read_text().split())) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        if n % 10 == 0:
            raise ValueError("every tenth fails")
        return n
"""
HOST_PROCESS = """
    from prometheus_client import Counter
    Counter("host_requests", "requests served by this web process").inc({n})
"""
SCRAPE = """
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess
    from conveyor import Conveyor
    from conveyor.contrib.prometheus import ConveyorCollector

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    registry.register(ConveyorCollector(Conveyor()))
    print(generate_latest(registry).decode(), end="")
"""


def _python(code: str, env: dict[str, str], *args: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_multiprocess_mode_beside_worker_processes(db_url: str, tmp_path: Path) -> None:
    """Two worker processes share the work; two host processes count requests in
    prometheus-client's multiprocess files. One scrape (itself in multiprocess mode)
    sums the host's counter across its processes and reports Conveyor's totals once:
    every worker process's outcomes, read from the database."""
    jobs = 60
    (tmp_path / "promapp.py").write_text(textwrap.dedent(APP_MODULE))
    multiproc = tmp_path / "multiproc"
    multiproc.mkdir()
    ledger = tmp_path / "pids.txt"
    env = {**os.environ, "CONVEYOR_URL": db_url, "PROMETHEUS_MULTIPROC_DIR": str(multiproc),
           "PROM_TEST_LEDGER": str(ledger),
           "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT / 'src'}"}
    app = Conveyor(db_url)
    try:
        app.enqueue_many(_jobs(app, jobs))
    finally:
        app.close()
    worker = subprocess.run(
        [sys.executable, "-m", "conveyor", "worker", "promapp:app", "--processes", "2", "--burst",
         "-c", "2", "--metrics-interval", "0.2", "--log-level", "warning"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert worker.returncode == 0, worker.stdout + worker.stderr
    for n in (3, 4):
        _python(HOST_PROCESS.format(n=n), env, cwd=tmp_path)
    assert len(list(multiproc.glob("*.db"))) == 2  # one file per host process

    found = samples(_python(SCRAPE, env, cwd=tmp_path))
    assert value(found, "host_requests_total") == 7
    finished = "conveyor_jobs_finished_total"
    assert value(found, finished, queue="default", task="step", outcome="completed") == 54
    assert value(found, finished, queue="default", task="step", outcome="discarded") == 6
    assert value(found, "conveyor_job_run_seconds_count", queue="default", task="step") == jobs
    assert value(found, "conveyor_database_up") == 1
    names = [f.name for f in text_string_to_metric_families(_python(SCRAPE, env, cwd=tmp_path))]
    assert len(names) == len(set(names))  # no family twice
    assert len(set(ledger.read_text().split())) == 2, "both worker processes ran jobs"
    ran_on = _ran_on(db_url)
    assert len(ran_on) == 2 and sum(ran_on.values()) == 54, ran_on


def _jobs(app: Conveyor, jobs: int) -> list[Any]:
    """The jobs of APP_MODULE's ``step`` (same name), enqueued from here."""

    @app.task(name="step", max_attempts=1)
    def step(n: int) -> int:
        return n

    return [step.job(n) for n in range(jobs)]


def _ran_on(db_url: str) -> dict[str, int]:
    app = Conveyor(db_url)
    try:
        nodes: dict[str, int] = {}
        for job in app.list_jobs(state="completed", limit=1000):
            if job.ran_on:
                nodes[job.ran_on] = nodes.get(job.ran_on, 0) + 1
        return nodes
    finally:
        app.close()


def test_without_the_extra_the_import_error_says_what_to_install() -> None:
    code = ("import sys; sys.modules['prometheus_client'] = None; import conveyor; "
            "import conveyor.contrib.prometheus")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "pip install 'conveyor[prometheus]'" in done.stderr
