"""Where ``conveyor demo`` runs, and the checks that keep it off the user's data.

The demo runs on its own file, ``./.conveyor-demo/conveyor-demo.db`` (created on first
use), never on ``$CONVEYOR_URL`` or an app's URL: only ``--url`` points it elsewhere.
Its jobs live in its own queues (``demo-*``). Before it writes anything it looks at the
target and refuses (exit 1) when it holds any job that is not the demo's (another queue,
or another task in a demo queue), when a file is not a Conveyor database, or when a live
worker serves the demo's queues. On its own previous data it deletes only the jobs of
its own queues. It never deletes a file.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from .._app import Conveyor, JobFilter
from .._app.operations import Operations
from ._base import CliFailure
from ._render import safe

DEMO_DIR = ".conveyor-demo"
DEMO_FILE = "conveyor-demo.db"
#: The demo's database when no --url is given, relative to the current directory.
DEMO_URL = f"sqlite:///{DEMO_DIR}/{DEMO_FILE}"
PREFIX = "demo-"


def sqlite_path(url: str) -> str | None:
    return url[len("sqlite:///"):] if url.lower().startswith("sqlite:///") else None


def prepare_default() -> str:
    """The default target: its directory is created, nothing else is touched."""
    os.makedirs(DEMO_DIR, exist_ok=True)
    return DEMO_URL


def redacted_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


def _refuse(url: str, why: str) -> CliFailure:
    return CliFailure(
        f"refusing to run the demo on {redacted_url(url)}: {why}. Nothing was changed. `conveyor demo` "
        f"without --url runs on its own ./{DEMO_DIR}/{DEMO_FILE}; give --url an empty "
        "database to run it elsewhere")


async def check_file(app: Conveyor, url: str, path: str) -> None:
    """An existing, non-empty file must be a Conveyor database (asked without opening
    it for writing)."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return
    health = await Operations(app, source="demo").health()
    if not health.reachable or not health.version:
        raise _refuse(url, f"{path} is not a Conveyor database ({health.error or 'no schema'})")


async def check_target(app: Conveyor, url: str, queues: Mapping[str, int],
                       tasks: Mapping[str, str]) -> int:
    """Refuse a target that holds jobs other than the demo's or has a live worker on the
    demo's queues; returns how many jobs of a previous demo it holds. ``tasks`` maps each
    demo queue to its task."""
    path = sqlite_path(url)
    if path is not None:
        await check_file(app, url, path)
    found = await app.list_queues_async()
    totals = {q.name: sum(q.counts.values()) for q in found}
    foreign = sorted(name for name, n in totals.items() if n and name not in queues)
    if foreign:
        n = sum(totals[name] for name in foreign)
        shown = ", ".join(safe(name) for name in foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise _refuse(url, f"it holds {n} job(s) that are not the demo's (queues {shown})")
    busy = sorted({node for q in found if q.name in queues for node in q.nodes})
    if busy:
        raise _refuse(url, f"{len(busy)} live worker(s) serve the demo's queues")
    ops = Operations(app, source="demo")
    ours = 0
    for name, total in totals.items():
        if name not in queues or not total:
            continue
        mine = await ops.count_matching(JobFilter(queue=name, task=tasks[name]), total + 1)
        if mine != total:
            raise _refuse(url, f"queue {safe(name)} holds {total - mine} job(s) of other tasks")
        ours += total
    return ours


async def clean_previous(app: Conveyor, queues: Mapping[str, int]) -> int:
    """Delete the jobs of the demo's own queues (a previous run's), and only those."""
    ops = Operations(app, source="demo")
    return sum([await ops.delete_queue_jobs(name) for name in queues])


def next_steps(hint: str) -> list[str]:
    """The closing lines: how to reach `conveyor` (the venv) and use Conveyor elsewhere."""
    lines = [f"inspect with: {hint}"]
    bin_dir = Path(sys.executable).absolute().parent
    ours = bin_dir / "conveyor"
    on_path = shutil.which("conveyor")
    if on_path is None or Path(on_path).resolve() != ours.resolve():
        activate = bin_dir / "activate"
        lines.append(f"`conveyor` is not on your PATH yet: run `source {activate}` first "
                     f"(or call {ours} directly)" if activate.exists() else
                     f"`conveyor` is not on your PATH: call {ours} directly")
    source = Path(__file__).resolve().parents[3]
    if (source / "pyproject.toml").exists():
        lines.append(f"in your own project's virtualenv: pip install -e {source} "
                     f"(or pip install {source})")
    else:
        lines.append("in your own project: pip install conveyor (see the README)")
    return lines


__all__ = ["DEMO_URL", "check_target", "clean_previous", "next_steps", "prepare_default",
           "redacted_url", "sqlite_path"]
