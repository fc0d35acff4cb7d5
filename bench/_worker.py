"""Running a real ``conveyor worker`` process and collecting what it reports."""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ._targets import Target

ROOT = Path(__file__).resolve().parent.parent


def _die_with_parent() -> None:
    """Linux: the worker gets SIGTERM if the suite dies first (no orphans)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclasses.dataclass
class WorkerRun:
    report: dict[str, Any]
    returncode: int
    #: Peak RSS of the worker process, from the kernel (wait4), in MiB.
    peak_rss_mb: float
    #: Total CPU seconds of the process, startup included.
    cpu_s: float
    launched: float


class WorkerProcess:
    """``python -m conveyor worker bench.apps:app -q QUEUE -c N [--burst]``."""

    def __init__(self, target: Target, queue: str, concurrency: int, burst: bool,
                 url: str | None = None) -> None:
        fd, self.report_path = tempfile.mkstemp(prefix="conveyor-bench-", suffix=".json")
        os.close(fd)
        argv = [sys.executable, "-m", "conveyor", "worker", "bench.apps:app", "-q", queue,
                "-c", str(concurrency), "--log-level", "WARNING", "--shutdown-timeout", "10"]
        if burst:
            argv.append("--burst")
        env = {**os.environ, "CONVEYOR_URL": url or target.url,
               "CONVEYOR_BENCH_REPORT": self.report_path}
        env.pop("CONVEYOR_APP", None)
        self.launched = time.time()
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, preexec_fn=_die_with_parent)

    def close(self) -> None:
        """Kill the worker if it still runs (the suite failed or was interrupted)."""
        if self.proc.returncode is None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> WorkerRun:
        """Wait for the exit (SIGKILL after ``timeout``), then read the report."""
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                self.proc.kill()
                _, status, usage = os.wait4(self.proc.pid, 0)
                break
            time.sleep(0.005)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        try:
            report = json.loads(Path(self.report_path).read_text() or "{}")
        finally:
            os.remove(self.report_path)
        return WorkerRun(report, self.proc.returncode, usage.ru_maxrss / 1024,
                         usage.ru_utime + usage.ru_stime, self.launched)
