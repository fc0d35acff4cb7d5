"""docs/deploy.md's files in examples/deploy/ are what the guide says, and they work.

What can be checked on this machine is checked for real: the systemd units with
``systemd-analyze verify`` (when present), the manifests and the Dockerfile field by
field against the guide's rules (SIGTERM grace longer than the shutdown timeout, probes
on ``conveyor check`` and ``/healthz``), and the commands they run (``conveyor migrate``,
``conveyor check``, the worker's and the dashboard's command lines) against real
databases, with the environment the manifests give them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from conveyor import Conveyor
from tests import _pg
from tests.conftest import wait_for

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "deploy.md"
EXAMPLES = ROOT / "examples" / "deploy"
SYSTEMD = EXAMPLES / "systemd"
KUBE = EXAMPLES / "kubernetes"
CONTAINER = EXAMPLES / "container"
BIN = Path(sys.executable).parent
CONVEYOR = BIN / "conveyor"
#: Seconds a stopped worker needs beyond --shutdown-timeout to hand jobs back and exit.
STOP_MARGIN = 5.0

# The app of the guide's first example, as a module of a project directory.
APP_SOURCE = '''\
from conveyor import Conveyor

app = Conveyor()            # the database URL is $CONVEYOR_URL


@app.task(queue="mail")
def send_welcome(user_id: int) -> None: ...
'''


# -- the files ---------------------------------------------------------------------------


def linked_examples() -> set[str]:
    """The example files the guide links to, relative to the repository."""
    targets = re.findall(r"\]\(\.\./(examples/deploy/[^)#]+)\)", GUIDE.read_text())
    return {t for t in targets if not t.endswith("/")}


def test_the_guide_links_every_example_file_and_each_exists() -> None:
    on_disk = {str(p.relative_to(ROOT)) for p in EXAMPLES.rglob("*") if p.is_file()}
    linked = linked_examples()
    assert linked - on_disk == set(), "the guide links files that do not exist"
    assert on_disk - linked == set(), "examples/deploy/ has files the guide does not name"


def test_the_environment_file_names_only_real_settings() -> None:
    source = "\n".join(p.read_text() for p in (ROOT / "src" / "conveyor").rglob("*.py"))
    guide = GUIDE.read_text()
    for line in (SYSTEMD / "conveyor.env").read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("=", 1)[0]
        assert f'"{name}"' in source, f"{name} is not a setting Conveyor reads"
        assert f"`{name}`" in guide, f"{name} is not in the guide's table of settings"


# -- systemd -----------------------------------------------------------------------------


def unit(name: str) -> dict[str, list[str]]:
    """A unit file's ``Key=value`` lines (every section), values in order."""
    keys: dict[str, list[str]] = {}
    for line in (SYSTEMD / name).read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            keys.setdefault(key, []).append(value)
    return keys


def shutdown_timeout(argv: list[str]) -> float:
    return float(argv[argv.index("--shutdown-timeout") + 1])


def test_systemd_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed: the units were not verified")
    (tmp_path / "conveyor.env").write_text((SYSTEMD / "conveyor.env").read_text())
    units = []
    for path in sorted(SYSTEMD.glob("*.service")):
        text = path.read_text().replace("/srv/myproject/venv/bin/conveyor", str(CONVEYOR))
        text = text.replace("/etc/conveyor/conveyor.env", str(tmp_path / "conveyor.env"))
        # a template is verified as an instance of it
        target = tmp_path / path.name.replace("@.", "@1.")
        target.write_text(text)
        units.append(str(target))
    done = subprocess.run([analyze, "verify", "--man=no", *units], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert not [line for line in output.splitlines() if "conveyor" in line], output


def test_a_broken_unit_is_caught_by_the_verify_step(tmp_path: Path) -> None:
    """The check above can fail: a unit whose command does not exist does not pass."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    broken = tmp_path / "conveyor-migrate.service"
    broken.write_text((SYSTEMD / "conveyor-migrate.service").read_text().replace(
        "/etc/conveyor/conveyor.env", "-/nonexistent.env"))
    done = subprocess.run([analyze, "verify", "--man=no", str(broken)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0


def test_the_worker_unit_waits_longer_than_the_shutdown_timeout() -> None:
    worker = unit("conveyor-worker@.service")
    argv = worker["ExecStart"][0].split()
    assert argv[0].endswith("/conveyor") and argv[1] == "worker"
    assert float(worker["TimeoutStopSec"][0]) >= shutdown_timeout(argv) + STOP_MARGIN
    assert worker["KillSignal"] == ["SIGTERM"]
    for name in ("conveyor-worker@.service", "conveyor-dashboard.service"):
        assert set(unit(name)["RestartPreventExitStatus"][0].split()) == {"2", "4"}
        assert "conveyor-migrate.service" in unit(name)["Requires"]
    assert unit("conveyor-migrate.service")["ExecStart"][0].split()[1:] == ["migrate"]


# -- the container image -------------------------------------------------------------------


def dockerfile() -> dict[str, list[str]]:
    """The final stage's instructions (continuation lines joined)."""
    text = (CONTAINER / "Dockerfile").read_text().replace("\\\n", " ")
    stages = re.split(r"^FROM ", text, flags=re.M)
    found: dict[str, list[str]] = {}
    for line in stages[-1].splitlines()[1:]:
        if line.strip() and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.setdefault(word, []).append(rest.strip())
    return found


def test_the_image_runs_conveyor_as_pid_1_unprivileged_with_a_health_check() -> None:
    image = dockerfile()
    assert yaml.safe_load(image["ENTRYPOINT"][0]) == ["conveyor"], "exec form, not a shell"
    command = yaml.safe_load(image["CMD"][0])
    assert command[0] == "worker"
    stop_timeout = float(re.search(r"--stop-timeout (\d+)", GUIDE.read_text())[1])  # type: ignore[index]
    assert stop_timeout >= shutdown_timeout(command) + STOP_MARGIN
    assert image["USER"] and image["USER"][0] not in ("root", "0")
    assert image["STOPSIGNAL"] == ["SIGTERM"]
    assert image["HEALTHCHECK"][0].endswith('CMD ["conveyor", "check"]')
    requirement = (CONTAINER / "requirements.txt").read_text().split("\n")[-2]
    extras = re.search(r"conveyor\[([\w,]+)\]", requirement)[1].split(",")  # type: ignore[index]
    pyproject = (ROOT / "pyproject.toml").read_text()
    for extra in extras:
        assert re.search(rf"^{extra} = \[", pyproject, flags=re.M), extra


# -- Kubernetes ----------------------------------------------------------------------------


def manifests() -> dict[tuple[str, str], dict[str, Any]]:
    """Every document of every manifest, by (kind, name)."""
    docs: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(KUBE.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            assert doc["apiVersion"] and doc["metadata"]["name"], path
            docs[(doc["kind"], doc["metadata"]["name"])] = doc
    return docs


def container(doc: dict[str, Any]) -> dict[str, Any]:
    containers = doc["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def manifest_env(doc: dict[str, Any], url: str, app_path: str) -> dict[str, str]:
    """The environment the pod's container gets, with the test's database and app."""
    docs = manifests()
    env: dict[str, str] = {}
    for source in container(doc).get("envFrom", []):
        if "configMapRef" in source:
            env.update(docs[("ConfigMap", source["configMapRef"]["name"])]["data"])
        else:
            env.update(docs[("Secret", source["secretRef"]["name"])]["stringData"])
    for item in container(doc).get("env", []):
        env[item["name"]] = item.get("value", f"from-{item['name'].lower()}")
    assert {"CONVEYOR_URL", "CONVEYOR_APP"} <= env.keys()
    env.update(CONVEYOR_URL=url, CONVEYOR_APP=app_path)
    return env


def argv(doc: dict[str, Any], env: dict[str, str]) -> list[str]:
    """The container's command line as the kubelet expands it ($(VAR) from env)."""
    spec = container(doc)
    words = [*spec["command"], *spec.get("args", [])]
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m[1]], w) for w in words]


def test_the_manifests_follow_the_guides_rules() -> None:
    docs = manifests()
    assert set(docs) == {("ConfigMap", "conveyor-config"), ("Secret", "conveyor-secrets"),
                         ("Job", "conveyor-migrate"), ("Deployment", "conveyor-worker"),
                         ("Deployment", "conveyor-dashboard"), ("Service", "conveyor-dashboard")}
    for (kind, _), doc in docs.items():
        if kind in ("Job", "Deployment"):
            pod = doc["spec"]["template"]
            if kind == "Deployment":
                assert doc["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
            assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    job = docs[("Job", "conveyor-migrate")]
    assert container(job)["command"] == ["conveyor", "migrate"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"

    worker = docs[("Deployment", "conveyor-worker")]
    spec = container(worker)
    assert spec["command"] == ["conveyor", "worker"]
    grace = worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace >= shutdown_timeout(spec["args"]) + STOP_MARGIN
    assert worker["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    for probe in ("readinessProbe", "livenessProbe"):
        assert spec[probe]["exec"]["command"] == ["conveyor", "check"]
    assert spec["livenessProbe"]["failureThreshold"] * spec["livenessProbe"]["periodSeconds"] >= 60

    dashboard = docs[("Deployment", "conveyor-dashboard")]
    spec = container(dashboard)
    assert spec["command"] == ["conveyor", "dashboard"]
    ready = spec["readinessProbe"]["httpGet"]
    assert ready["path"] == "/healthz"
    assert {"name": "Host", "value": "localhost"} in ready["httpHeaders"]
    port_names = {p["name"] for p in spec["ports"]}
    assert ready["port"] in port_names and spec["livenessProbe"]["tcpSocket"]["port"] in port_names
    service = docs[("Service", "conveyor-dashboard")]
    assert service["spec"]["ports"][0]["targetPort"] in port_names
    assert service["spec"]["selector"].items() <= dashboard["spec"]["template"]["metadata"]["labels"].items()


# -- the commands, run for real -------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The guide's example app as ``myproject.jobs:app`` in a project directory."""
    package = tmp_path / "project" / "myproject"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "jobs.py").write_text(APP_SOURCE)
    assert APP_SOURCE in GUIDE.read_text().replace("```python\n# myproject/jobs.py\n", "")
    return package.parent


def run(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **env, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(command, env=full, cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_the_release_step_then_the_probes_on_a_new_postgres_database(
    postgres_admin_url: str, project: Path
) -> None:
    docs = manifests()
    worker = docs[("Deployment", "conveyor-worker")]
    probe = container(worker)["readinessProbe"]["exec"]["command"]
    with _pg.scratch_database(postgres_admin_url, "conveyor_deploy") as url:
        env = manifest_env(worker, url, "myproject.jobs:app")
        before = run(probe, env, project)
        assert before.returncode == 1, before
        assert "expected_schema" in before.stdout + before.stderr
        job = docs[("Job", "conveyor-migrate")]
        migrated = run(container(job)["command"], manifest_env(job, url, "myproject.jobs:app"), project)
        assert migrated.returncode == 0, migrated
        after = run(probe, env, project)
        assert after.returncode == 0, after


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str]]]:
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)


def test_the_worker_command_runs_jobs_and_stops_within_its_grace(
    db_url: str, project: Path, started: list[subprocess.Popen[str]]
) -> None:
    worker = manifests()[("Deployment", "conveyor-worker")]
    env = manifest_env(worker, db_url, "myproject.jobs:app")
    enqueued = run(["conveyor", "enqueue", "send_welcome", "--args", "[7]",
                    "--json"], env, project)
    assert enqueued.returncode == 0, enqueued
    job_id = int(json.loads(enqueued.stdout)["id"])
    full = {**os.environ, **env, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    process = subprocess.Popen(argv(worker, env), env=full, cwd=project, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    started.append(process)
    checker = Conveyor(db_url)
    try:
        done = wait_for(lambda: (job := checker.get_job(job_id)) and job.state == "completed",
                        timeout=60, message="the manifest's worker to run the job")
        assert done
        labels = [node.labels for node in checker.list_nodes() if node.pid == process.pid]
    finally:
        checker.close()
    # $(POD_NAME) and $(NODE_NAME) expanded as the kubelet does, recorded with the node
    assert labels == [{"pod": "from-pod_name", "node": "from-node_name"}]
    process.send_signal(signal.SIGTERM)
    grace = worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    output, _ = process.communicate(timeout=grace)
    assert process.returncode == 0, output


def test_the_dashboard_answers_the_probe_and_refuses_a_pod_ip_host(
    db_url: str, project: Path, started: list[subprocess.Popen[str]]
) -> None:
    dashboard = manifests()[("Deployment", "conveyor-dashboard")]
    env = manifest_env(dashboard, db_url, "myproject.jobs:app")
    port = free_port()
    command = argv(dashboard, env)
    command[command.index("--port") + 1] = str(port)
    full = {**os.environ, **env, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    process = subprocess.Popen(command, env=full, cwd=project, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    started.append(process)
    probe = container(dashboard)["readinessProbe"]["httpGet"]
    headers = {h["name"]: h["value"] for h in probe["httpHeaders"]}
    url = f"http://127.0.0.1:{port}{probe['path']}"

    def answered() -> httpx.Response | None:
        assert process.poll() is None, process.communicate()[0]
        try:
            return httpx.get(url, headers=headers, timeout=5)
        except httpx.TransportError:
            return None

    response = wait_for(answered, timeout=60, interval=0.1, message="the dashboard to listen")
    assert response is not None
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "ok"
    refused = httpx.get(url, headers={"Host": f"10.1.2.3:{port}"}, timeout=5)
    assert refused.status_code == 421
    unauthenticated = httpx.get(f"http://127.0.0.1:{port}/", headers=headers, timeout=5)
    assert unauthenticated.status_code == 401
