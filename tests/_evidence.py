"""Which commit a published figure was measured on, and whether that code is still HEAD's.

Every result file of the benchmark suite (``bench/results/*.json``) and of the chaos
suite (``$CONVEYOR_CHAOS_RESULTS/*.json``) records :func:`stamp`: the commit checked out
when it was measured and whether the *measured code* (the paths below, and only those:
results, docs and reports are not measured code) was clean, i.e. identical to that
commit. The reports (``bench/results/summary.md``, the README's performance table,
``docs/reliability.md``) show each row's commit and mark a row *stale* when its commit is
unknown, its tree was modified, or its measured code differs from HEAD's
(:func:`staleness`). ``tests/test_evidence.py`` checks the published reports against git.

Git runs without the system or user configuration (``GIT_CONFIG_NOSYSTEM``,
``GIT_CONFIG_GLOBAL``), without ``GIT_*`` variables of the environment, never over the
network, and with ``safe.directory=*`` so that a checkout owned by another user is read.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: The standalone tools of ``make bench`` and the result each writes. `python -m bench`
#: (the rows of the reports) imports none of them, so they are not the rows' measured
#: code; each tool's own result is checked against its tool by tests/test_evidence.py.
BENCH_TOOLS: dict[str, tuple[str, ...]] = {
    "bench/results/probes.json": ("bench/probes.py", "bench/floor.py"),
    "bench/results/capacity.json": ("bench/capacity.py",),
    "bench/results/read_replica.json": ("bench/read_replica.py",),
    "bench/results/chunks.json": ("bench/chunks.py",),
    "bench/results/fairness.json": ("bench/fairness.py",),
    "bench/results/search.json": ("bench/search.py",),
}
#: ... and those whose output is printed or derived (model, profiles, retention), and the
#: A/B and quick runners (`python -m bench` imports none of them either).
BENCH_TOOL_FILES: tuple[str, ...] = tuple(sorted(
    {f for files in BENCH_TOOLS.values() for f in files}
    | {"bench/model.py", "bench/profile.py", "bench/retention.py",
       "bench/ab.py", "bench/_ab_run.py", "bench/quick.py", "bench/floor_enqueue.py"}))

#: What determines the benchmark figures: the library, the suite's own code, the
#: dependencies. Git pathspecs, relative to the repository root.
BENCH_MEASURED: tuple[str, ...] = ("src", "pyproject.toml", ":(glob)bench/*.py",
                                   *(f":(exclude){f}" for f in BENCH_TOOL_FILES),
                                   "tests/_pg.py")

#: What determines `make bench-peers`' figures (bench/results/peers.json): the library,
#: the peers' bench (its runners and the settings it gives each system), the dependencies.
PEERS_MEASURED: tuple[str, ...] = ("src", "pyproject.toml", "bench/peers")

#: What determines `make bench-quick`'s figures (bench/results/quick.json): its workloads
#: (every top-level bench module), the peers' bench for its pgqueuer figures, the library.
QUICK_MEASURED: tuple[str, ...] = ("src", "pyproject.toml", ":(glob)bench/*.py", "bench/peers",
                                   "tests/_pg.py", ":(exclude)bench/_docs.py")

#: What determines `python -m bench.chunks`' figures (bench/results/chunks.json): the
#: library, the tool and the bench modules it imports.
CHUNKS_MEASURED: tuple[str, ...] = ("src", "pyproject.toml", "bench/chunks.py", "bench/_env.py",
                                    "bench/_targets.py", "bench/__main__.py", "tests/_pg.py")

#: What determines `python -m bench.fairness`' figures (bench/results/fairness.json): the
#: library, the tool and the bench modules it imports.
FAIRNESS_MEASURED: tuple[str, ...] = ("src", "pyproject.toml", "bench/fairness.py",
                                      "bench/_env.py", "bench/_targets.py",
                                      "bench/__main__.py", "tests/_pg.py")

#: What determines `python -m bench.search`' figures (bench/results/search.json): the
#: library, the tool and the bench modules it imports.
SEARCH_MEASURED: tuple[str, ...] = ("src", "pyproject.toml", "bench/search.py", "bench/_env.py",
                                    "bench/_targets.py", "bench/__main__.py", "tests/_pg.py")

#: What determines the chaos results: the library, the scenarios and their harness, the
#: apps and fixtures they run, the property-based model test.
CHAOS_MEASURED: tuple[str, ...] = ("src", "pyproject.toml", ":(glob)tests/chaos/*.py",
                                   "tests/apps", "tests/conftest.py", "tests/_pg.py",
                                   "tests/_signals.py", "tests/test_storage_model.py",
                                   "tests/test_flow_processes.py")

#: A report's header line: ``N of M rows measured on older code``.
HEADER = re.compile(r"\*\*(\d+) of (\d+) rows\*\* measured on older code")
SHA = re.compile(r"`([0-9a-f]{7,40})`")


class GitUnavailable(RuntimeError):
    """No git, or no history (an exported tarball): nothing can be compared."""


def git(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull,
               GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0", LC_ALL="C")
    try:
        return subprocess.run(["git", "-c", "safe.directory=*", "-c", "core.quotepath=off",
                               *args], cwd=ROOT, env=env, capture_output=True, text=True,
                              check=check, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise GitUnavailable(f"git could not run: {exc}") from exc


def head() -> str:
    """HEAD's full sha; :class:`GitUnavailable` when there is no history."""
    done = git("rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    if done.returncode != 0 or not done.stdout.strip():
        raise GitUnavailable(f"{ROOT} has no git history ({done.stderr.strip() or 'no HEAD'})")
    return done.stdout.strip()


def stamp(measured: Sequence[str]) -> dict[str, Any]:
    """What a result file records: the commit and whether the measured code was clean."""
    try:
        commit: str | None = head()
    except GitUnavailable:
        return {"commit": None, "clean": None, "measured": list(measured)}
    status = git("status", "--porcelain", "--untracked-files=all", "--", *measured)
    clean = None if status.returncode != 0 else not status.stdout.strip()
    return {"commit": commit, "clean": clean, "measured": list(measured)}


def resolve(commit: str) -> str | None:
    done = git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def differs_from_head(commit: str, measured: Sequence[str]) -> bool | None:
    """Whether the measured code at ``commit`` differs from HEAD's (None: unknown commit)."""
    full = resolve(commit)
    if full is None:
        return None
    done = git("diff", "--quiet", "--no-ext-diff", "--no-textconv", full, "HEAD", "--",
               *measured)
    if done.returncode not in (0, 1):
        return None
    return done.returncode == 1


def staleness(commit: str | None, clean: bool | None, measured: Sequence[str]) -> str | None:
    """Why a row does not describe HEAD's measured code, or None when it does."""
    if not commit:
        return "commit not recorded"
    differs = differs_from_head(commit, measured)
    if differs is None:
        return "commit not in this history"
    if differs:
        return "measured code differs from HEAD's"
    if clean is None:
        return "clean tree not recorded"
    if not clean:
        return "measured on modified code"
    return None


def describe(measured: Sequence[str]) -> str:
    """The measured paths for a reader: ``src``, ``bench/*.py``, ..."""
    kept = [f"`{p.removeprefix(':(glob)')}`" for p in measured if not p.startswith(":(exclude)")]
    left = [f"`{p.removeprefix(':(exclude)bench/')}`" for p in measured
            if p.startswith(":(exclude)")]
    return ", ".join(kept) + (f" (not the standalone tools {', '.join(left)})" if left else "")


def short(commit: str | None) -> str:
    return f"`{commit[:7]}`" if commit else "unknown"


def status_cell(reason: str | None) -> str:
    return "current" if reason is None else f"**stale**: {reason}"


def header(stale: int, total: int, command: str) -> str:
    """The count every report carries above its rows (checked by tests/test_evidence.py)."""
    text = f"**{stale} of {total} rows** measured on older code"
    if stale:
        return (f"{text}: rerun `{command}` on the current commit. A stale row's figures "
                "describe the commit in its row, not this one.")
    return f"{text}: every row's measured code is identical to this commit's."
