"""``python -m bench.ab BASE [CASES...]``: is HEAD faster or slower than BASE, here, now?

Both commits are checked out into temporary git worktrees (``git worktree add
--detach``) and run A B A B ... for ``--rounds`` rounds, each run in a fresh process
with that side's ``src`` first on ``PYTHONPATH`` and the *current* harness (this
``bench/``) after it, so both sides are measured the same way. Per case it prints each
side's median and range, and the ratio HEAD/BASE (higher is faster) taken pair by pair:
run i of HEAD over run i of BASE, so a machine whose speed drifts moves both halves of a
pair together. The last line per case is meant for a commit message::

    ab 46e4f18..HEAD e2e_sqlite_c100: 1.03x (0.97-1.08, 5 pairs)

The worktrees are removed afterwards, also on Ctrl-C. Results go to
``bench/results/ab/`` only with ``--out``. Example:
``python -m bench.ab HEAD~5 e2e_sqlite_c100 e2e_postgres_c100 --rounds 5``
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ._ab_run import CANNOT_DRIVE, CASES, RESULT_PREFIX
from ._env import compile_bytecode

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "bench" / "results" / "ab"
DEFAULT_CASES = ("e2e_sqlite_c100", "e2e_postgres_c100")


class CannotDrive(RuntimeError):
    """The current harness cannot run a case on one side's library."""


@dataclasses.dataclass(frozen=True)
class Side:
    """One side of the comparison: a label, its commit and the tree its library is in."""

    label: str
    commit: str
    tree: Path

    @property
    def src(self) -> Path:
        return self.tree / "src"

    def env(self) -> dict[str, str]:
        """The environment a run of this side gets: its library first, then the harness."""
        env = {k: v for k, v in os.environ.items() if k not in ("CONVEYOR_APP", "CONVEYOR_URL")}
        env["PYTHONPATH"] = os.pathsep.join([str(self.src), str(ROOT)])
        return env


@dataclasses.dataclass(frozen=True)
class Comparison:
    """The runs of one case, paired in the order they ran."""

    case: str
    base: list[float]
    head: list[float]

    @property
    def ratios(self) -> list[float]:
        return [h / b for b, h in zip(self.base, self.head, strict=False) if b > 0]

    def line(self, base_label: str, head_label: str) -> str:
        """The one-line verdict for a commit message."""
        r = self.ratios
        if not r:
            return f"ab {base_label}..{head_label} {self.case}: no pair measured"
        return (f"ab {base_label}..{head_label} {self.case}: {statistics.median(r):.2f}x "
                f"({min(r):.2f}-{max(r):.2f}, {len(r)} pair{'s' if len(r) != 1 else ''})")

    def as_dict(self) -> dict[str, Any]:
        r = self.ratios
        return {"case": self.case, "base": self.base, "head": self.head, "ratios": r,
                "ratio_median": statistics.median(r) if r else None,
                "ratio_range": [min(r), max(r)] if r else None}


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def resolve(repo: Path, rev: str) -> str:
    """The full commit id of ``rev`` (any git revision), or a clear error."""
    return _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")


@contextlib.contextmanager
def checkout(repo: Path, rev: str, label: str) -> Iterator[Side]:
    """``rev`` in a temporary detached worktree of ``repo``, removed on the way out."""
    commit = resolve(repo, rev)
    parent = Path(tempfile.mkdtemp(prefix=f"conveyor-ab-{label.lower()}-"))
    tree = parent / "tree"
    try:
        _git(repo, "worktree", "add", "--detach", str(tree), commit)
        if not (tree / "src" / "conveyor" / "__init__.py").exists():
            raise SystemExit(f"{rev} ({commit[:7]}) has no src/conveyor: not a Conveyor commit")
        yield Side(label, commit, tree)
    finally:
        subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)],
                       capture_output=True)
        shutil.rmtree(parent, ignore_errors=True)
        subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True)


@contextlib.contextmanager
def interrupted_by_sigterm() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C, so the worktrees are removed either way."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


Measure = Callable[[Side, str], float]


def interleave(cases: Sequence[str], base: Side, head: Side, rounds: int,
               measure: Measure, log: Callable[[str], None] = print) -> list[Comparison]:
    """``rounds`` rounds; in each, every case runs BASE then HEAD (A B A B ...)."""
    runs: dict[str, tuple[list[float], list[float]]] = {c: ([], []) for c in cases}
    for i in range(rounds):
        for case in cases:
            for side, values in ((base, runs[case][0]), (head, runs[case][1])):
                began = time.monotonic()
                values.append(measure(side, case))
                log(f"round {i + 1}/{rounds} {case} {side.label} {side.commit[:7]}: "
                    f"{values[-1]:,.1f} ({time.monotonic() - began:.1f}s)")
    return [Comparison(c, *runs[c]) for c in cases]


def side_report(label: str, commit: str, values: list[float], unit: str) -> str:
    return (f"  {label:<4} {commit[:7]}: median {statistics.median(values):,.1f} {unit} "
            f"(range {min(values):,.1f}-{max(values):,.1f}, {len(values)} runs)")


Details = dict[tuple[str, str], list[dict[str, Any]]]
#: Per-job costs reported beside the throughput ratio when a case measures them.
COSTS = (("cpu_us_per_job", "CPU µs/job (measured process)"),
         ("round_trips_per_job", "round trips/job"))


def subprocess_measure(url: str, workdir: Path, jobs: int, timeout: float,
                       details: Details | None = None) -> Measure:
    """Each run in a fresh process (``bench._ab_run``) on the side's library; each run's
    whole result is appended to ``details[(side label, case)]``."""

    def measure(side: Side, case: str) -> float:
        spec = CASES[case]
        dirs = workdir / side.label.lower()
        db_url = _side_database(url, side.label) if spec.backend == "postgres" else ""
        argv = [sys.executable, "-m", "bench._ab_run", case, "--workdir", str(dirs),
                "--expect-src", str(side.src), "--url", db_url, "--jobs", str(jobs)]
        done = subprocess.run(argv, cwd=ROOT, env=side.env(), capture_output=True, text=True,
                              timeout=timeout)
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith(RESULT_PREFIX)]
        if done.returncode != 0 or not lines:
            why = "\n".join(done.stderr.strip().splitlines()[-15:])
            kind = ("the current harness cannot drive" if done.returncode == CANNOT_DRIVE
                    else "a run failed on")
            raise CannotDrive(f"{kind} {side.label} {side.commit[:7]} for case {case} "
                              f"(exit {done.returncode}):\n{why}")
        doc = json.loads(lines[-1][len(RESULT_PREFIX):])
        if details is not None:
            details.setdefault((side.label, case), []).append(doc["result"])
        return float(doc["value"])

    return measure


def _side_database(url: str, label: str) -> str:
    """Each side its own database: an older schema never meets a newer one."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/conveyor_bench_ab_{label.lower()}"))


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.ab", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="cases:\n" + "\n".join(f"  {c.name:<26} {c.about}" for c in CASES.values()))
    parser.add_argument("base", help="the commit to compare against (any git revision)")
    parser.add_argument("cases", nargs="*", metavar="CASE",
                        help=f"cases to run (default: {' '.join(DEFAULT_CASES)})")
    parser.add_argument("--head", default="HEAD", help="the other commit (default: HEAD)")
    parser.add_argument("--working-tree", action="store_true",
                        help="measure this repository's working tree (uncommitted changes "
                             "included) as the HEAD side instead of a checkout of --head")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=0, help="override the cases' job count")
    parser.add_argument("--pg-url", default=None,
                        help="as for `python -m bench` (default: a private cluster with "
                             "default settings; 'local': this machine's server)")
    parser.add_argument("--timeout", type=float, default=900.0, help="per run, in seconds")
    parser.add_argument("--out", nargs="?", const=OUT_DIR, type=Path, default=None,
                        metavar="DIR", help=f"write the runs as JSON (default DIR: {OUT_DIR})")
    args = parser.parse_args(argv)
    args.cases = args.cases or list(DEFAULT_CASES)
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


@contextlib.contextmanager
def sides(repo: Path, base: str, head: str, working_tree: bool) -> Iterator[tuple[Side, Side]]:
    """BASE and HEAD checked out (HEAD: this working tree when asked), removed after."""
    with contextlib.ExitStack() as stack:
        a = stack.enter_context(checkout(repo, base, "BASE"))
        b = (Side("HEAD", resolve(repo, "HEAD"), repo) if working_tree
             else stack.enter_context(checkout(repo, head, "HEAD")))
        yield a, b


def cost_lines(case: str, details: Details) -> list[str]:
    """Per-job costs (lower is better), each side's median and the paired ratio."""
    lines = []
    base, head = details.get(("BASE", case), []), details.get(("HEAD", case), [])
    for key, label in COSTS:
        pairs = [(b[key], h[key]) for b, h in zip(base, head, strict=False)
                 if isinstance(b.get(key), int | float) and isinstance(h.get(key), int | float)]
        if not pairs:
            continue
        comp = Comparison(case, [float(b) for b, _ in pairs], [float(h) for _, h in pairs])
        r = comp.ratios
        lines.append(f"  {label}: BASE {statistics.median(comp.base):.4g}, HEAD "
                     f"{statistics.median(comp.head):.4g}; HEAD/BASE {statistics.median(r):.2f}x"
                     f" ({min(r):.2f}-{max(r):.2f}, lower is cheaper)" if r else "")
    return [line for line in lines if line]


def report(comparisons: list[Comparison], base: Side, head: Side,
           head_label: str, details: Details | None = None) -> list[str]:
    cores, load = os.cpu_count(), os.getloadavg()[0]
    lines = [f"machine: {cores} cores, load average {load:.2f} at the end "
             "(other work on a shared machine widens the ranges)"]
    for comp in comparisons:
        spec = CASES[comp.case]
        lines += [f"{comp.case}: {spec.about}",
                  side_report("BASE", base.commit, comp.base, spec.unit),
                  side_report("HEAD", head.commit, comp.head, spec.unit),
                  *cost_lines(comp.case, details or {})]
    lines += [c.line(base.commit[:7], head_label) for c in comparisons]
    return lines


def write_out(out: Path, comparisons: list[Comparison], base: Side, head: Side,
              args: argparse.Namespace, details: Details) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"ab-{time.strftime('%Y%m%dT%H%M%S')}-{base.commit[:7]}-{head.commit[:7]}.json"
    doc = {"base": {"rev": args.base, "commit": base.commit},
           "head": {"rev": args.head, "commit": head.commit, "working_tree": args.working_tree},
           "rounds": args.rounds, "jobs": args.jobs or None, "cores": os.cpu_count(),
           "loadavg_1m_end": os.getloadavg()[0], "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "cases": [{**c.as_dict(), "about": CASES[c.case].about,
                      "runs": {side: details.get((side, c.case), [])
                               for side in ("BASE", "HEAD")}} for c in comparisons]}
    path.write_text(json.dumps(doc, indent=2))
    return path


def main(argv: list[str] | None = None, measure: Measure | None = None) -> int:
    args = _parse(argv)
    head_label = "worktree" if args.working_tree else args.head
    details: Details = {}
    needs_pg = any(CASES[c].backend == "postgres" for c in args.cases)
    try:
        with interrupted_by_sigterm(), contextlib.ExitStack() as stack:
            base, head = stack.enter_context(sides(ROOT, args.base, args.head,
                                                   args.working_tree))
            compile_bytecode(base.src, head.src, ROOT / "bench")
            if measure is None:
                url = ""
                if needs_pg:
                    from .__main__ import postgres_url

                    url = stack.enter_context(postgres_url(args.pg_url))
                workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(
                    prefix="conveyor-ab-db-")))
                measure = subprocess_measure(url, workdir, args.jobs, args.timeout, details)
            print(f"BASE {args.base} = {base.commit[:7]} ({base.tree}), HEAD {head_label} = "
                  f"{head.commit[:7]} ({head.tree}); {args.rounds} rounds, jobs per run: "
                  f"{args.jobs or 'the case default'}", flush=True)
            comparisons = interleave(args.cases, base, head, args.rounds, measure,
                                     lambda s: print(s, flush=True))
            for line in report(comparisons, base, head, head_label, details):
                print(line)
            if args.out is not None:
                print(f"wrote {write_out(args.out, comparisons, base, head, args, details)}")
    except CannotDrive as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: worktrees removed", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
