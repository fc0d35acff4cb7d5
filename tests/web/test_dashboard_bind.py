"""``conveyor dashboard --host ADDRESS`` serves the URL it prints (issue 28 defect 10):
``--host 127.0.0.2`` is loopback, yet was not one of the names served by default, so
its own URL answered 421."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from conveyor import Conveyor

BIND = "127.0.0.2"


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def test_the_printed_url_answers_on_another_loopback_address(tmp_path: Path) -> None:
    try:
        port = _free_port(BIND)
    except OSError as exc:  # not Linux: only 127.0.0.1 is configured
        pytest.skip(f"{BIND} cannot be bound here: {exc}")
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    Conveyor(url).migrate()
    proc = subprocess.Popen([sys.executable, "-m", "conveyor", "dashboard", "--host", BIND,
                             "--port", str(port), "--url", url],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        printed = ""
        deadline = time.monotonic() + 30
        while not printed:  # the line comes before the server starts: wait for it
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "the dashboard exited before printing a URL"
            assert time.monotonic() < deadline, "no URL printed within 30 s"
            found = re.search(r"https?://\S+/", line)
            printed = found.group(0) if found else ""
        assert printed == f"http://{BIND}:{port}/", printed
        while True:
            try:
                response = httpx.get(printed + "jobs", timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, "never served"
                time.sleep(0.05)
        assert response.status_code == 200, (response.status_code, response.text[:200])
        foreign = httpx.get(printed + "jobs", headers={"host": "evil.example"}, timeout=2)
        assert foreign.status_code == 421  # other names are still refused
    finally:
        proc.terminate()
        proc.wait(15)
