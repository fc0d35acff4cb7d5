"""A venv per peer, from the package registry, cached under
``~/.cache/conveyor-bench-peers/<peer>-<version>`` so that reruns reuse it.

uv (``uv venv`` + ``uv pip install``) where it is found, else ``python -m venv`` and
pip. A venv is reused only when its stamp names the same requirements: changing a pin
rebuilds it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ._systems import System

CACHE = Path(os.environ.get("CONVEYOR_BENCH_PEERS_CACHE",
                            Path.home() / ".cache" / "conveyor-bench-peers"))
STAMP = ".conveyor-bench-requirements"
#: The peers' venvs run the interpreter the benchmark runs (.venv-bench: the newest
#: CPython >= 3.12 found), so every system of a run is on one interpreter.
PYTHON = sys.executable


class VenvError(RuntimeError):
    """The venv could not be made (offline, a package missing): the peer is skipped."""


def directory(system: System) -> Path:
    return CACHE / f"{system.peer}-{system.version or 'latest'}"


def _uv() -> str | None:
    beside = Path(sys.executable).parent / "uv"
    return str(beside) if beside.exists() else shutil.which("uv")


def _run(argv: list[str], timeout: float) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VenvError(f"{argv[0]} {argv[1]}: {exc}") from exc
    if done.returncode:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise VenvError(f"{' '.join(argv[:3])} failed ({done.returncode}): " + " | ".join(tail))


def ensure(system: System, timeout: float = 600) -> Path:
    """The venv's interpreter, the venv made first unless the cached one fits."""
    if not system.packages:
        return Path(sys.executable)
    home = directory(system)
    python = home / "bin" / "python"
    # bytecode compiled at install, as pip does (uv does not by default): the peers'
    # modules are not compiled again by each run (PYTHONDONTWRITEBYTECODE keeps none)
    # the interpreter is part of what a venv was made with: another one makes it again
    wanted = "\n".join([*sorted(system.packages), "# bytecode compiled",
                        f"# python {sys.version.split()[0]} at {sys.base_prefix}"])
    stamp = home / STAMP
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    shutil.rmtree(home, ignore_errors=True)
    home.parent.mkdir(parents=True, exist_ok=True)
    uv = _uv()
    if uv:
        _run([uv, "venv", "--quiet", "--python", PYTHON, str(home)], timeout)
        _run([uv, "pip", "install", "--quiet", "--compile-bytecode", "--python", str(python),
              *system.packages],
             timeout)
    else:
        _run([PYTHON, "-m", "venv", str(home)], timeout)
        _run([str(python), "-m", "pip", "install", "--quiet", *system.packages], timeout)
    stamp.write_text(wanted)
    return python
