"""One run of one A/B case, in a process of its own (``python -m bench._ab_run``).

``bench.ab`` starts this module once per run with one side's library first on
``PYTHONPATH`` and the current harness (``bench/``, ``tests/``) after it, so both
commits are driven by the same harness through the library's public API. The last line
of stdout is ``AB-RESULT <json>``: ``{"value": <higher is better>, "result": {...}}``.
A commit the harness cannot drive (an import or an attribute it lacks, a run that did
not finish every job exactly once) exits with status 3 and says why on stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The marker of the result line the parent reads.
RESULT_PREFIX = "AB-RESULT "
#: Exit status of a run the harness could not drive on this commit.
CANNOT_DRIVE = 3


@dataclasses.dataclass(frozen=True)
class AbCase:
    """A benchmark case sized to take seconds; ``value`` is higher-is-better."""

    name: str
    #: "sqlite", "postgres", or None (no database).
    backend: str | None
    jobs: int
    unit: str
    about: str


#: The cases run on each backend besides the burn-downs: (name, jobs, what it measures).
_PER_BACKEND = (
    ("peers_e2e_{}", 20_000, "20,000 pre-enqueued no-op jobs drained by app.run_worker at "
     "concurrency 100 in process (bench/peers/run_conveyor.py e2e)"),
    ("enqueue_many_{}", 50_000, "50,000 jobs through enqueue_many in batches of 1,000 "
     "(bench/w_enqueue.py bulk)"),
    ("enqueue_many_{}_b10000", 50_000, "50,000 jobs through enqueue_many in batches of "
     "10,000, the bulk floor's batches (bench/w_enqueue.py bulk)"),
    ("peers_bulk_{}", 50_000, "50,000 jobs through one enqueue_many_async call, as "
     "bench.peers measures Conveyor's bulk (bench/peers/run_conveyor.py bulk)"),
    ("enqueue_async_{}_p100", 5_000, "5,000 enqueue_async calls from 100 coroutines on one "
     "loop (bench/w_enqueue.py single_async)"),
    ("enqueue_{}_t1", 3_000, "3,000 task.enqueue() calls from one thread "
     "(bench/w_enqueue.py single)"),
    ("enqueue_async_{}_p1", 3_000, "3,000 enqueue_async calls one at a time, one coroutine "
     "(bench/w_enqueue.py single_async)"),
)


def _cases() -> dict[str, AbCase]:
    out = [AbCase("import_conveyor", None, 1, "imports/s",
                  "`import conveyor` in a fresh interpreter (1 / wall seconds)")]
    for backend in ("sqlite", "postgres"):
        for c in (100, 1000):
            out.append(AbCase(f"e2e_{backend}_c{c}", backend, 20_000, "jobs/s",
                              f"burn-down of 20,000 no-op jobs, one worker at concurrency {c}"
                              " (bench/w_burndown.py)"))
        out += [AbCase(name.format(backend), backend, jobs, "jobs/s", about)
                for name, jobs, about in _PER_BACKEND]
    return {c.name: c for c in out}


CASES: dict[str, AbCase] = _cases()


def _import_rate(jobs: int) -> dict[str, Any]:
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import conveyor"], check=True)
    seconds = time.perf_counter() - began
    return {"seconds": round(seconds, 4), "jobs_per_s": round(1 / seconds, 3),
            "exactly_once": True}


def _runner(case: AbCase) -> Callable[[Any, int], dict[str, Any]]:
    """The workload function of ``case`` (imported here: a commit the harness cannot
    drive fails at this import, which the caller reports)."""
    from . import w_burndown, w_enqueue

    if case.name.startswith("peers_"):
        return lambda target, jobs: _peers(case, target, jobs)
    if case.name.startswith("e2e_"):
        concurrency = int(case.name.rsplit("_c", 1)[1])
        return lambda target, jobs: w_burndown.burndown(target, jobs, concurrency)
    if case.name.startswith("enqueue_many_"):
        batch = 10_000 if case.name.endswith("_b10000") else 1000
        return lambda target, jobs: w_enqueue.bulk(target, jobs, batch)
    if case.name.startswith("enqueue_") and case.name.endswith("_t1"):
        return lambda target, jobs: w_enqueue.single(target, jobs, 1)
    if case.name.startswith("enqueue_async_"):
        producers = int(case.name.rsplit("_p", 1)[1])
        return lambda target, jobs: w_enqueue.single_async(target, jobs, producers)
    raise KeyError(case.name)


def _peers(case: AbCase, target: Any, jobs: int) -> dict[str, Any]:
    """A peers' workload (end to end, bulk), run as ``bench.peers`` runs it for Conveyor."""
    import asyncio

    from .peers import run_conveyor

    target.reset()
    config = {"backend": case.backend, "workdir": str(target.workdir), "jobs": jobs,
              "pg_url": target.url}
    workload = run_conveyor.e2e if case.name.startswith("peers_e2e_") else run_conveyor.bulk
    return asyncio.run(workload(config))


def run_case(case: AbCase, jobs: int, url: str, workdir: Path) -> dict[str, Any]:
    """One run of ``case`` on this process's library; its result dict."""
    if case.backend is None:
        return _import_rate(jobs)
    from ._targets import Target

    run = _runner(case)
    target = (Target.sqlite(workdir) if case.backend == "sqlite"
              else Target.postgres(url, workdir))
    try:
        return run(target, jobs)
    finally:
        target.close()


def _check_library(expect_src: Path) -> str:
    import conveyor

    where = Path(conveyor.__file__).resolve()
    if not where.is_relative_to(expect_src.resolve()):
        raise SystemExit(f"conveyor was imported from {where}, not from {expect_src}: "
                         "PYTHONPATH did not put the side's tree first")
    return str(where)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench._ab_run")
    parser.add_argument("case", choices=sorted(CASES))
    parser.add_argument("--jobs", type=int, default=0)
    parser.add_argument("--url", default="")
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--expect-src", type=Path, required=True)
    args = parser.parse_args(argv)
    case = CASES[args.case]
    library = _check_library(args.expect_src)
    try:
        result = run_case(case, args.jobs or case.jobs, args.url, args.workdir)
    except (ImportError, AttributeError, TypeError) as exc:
        traceback.print_exc()
        print(f"the current harness cannot drive this commit's library ({library}): "
              f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return CANNOT_DRIVE
    value = result.get("jobs_per_s")
    if not result.get("exactly_once", True) or not isinstance(value, int | float) or value <= 0:
        print(f"the run did not measure this commit: exactly_once="
              f"{result.get('exactly_once')}, jobs_per_s={value}, worker_exit="
              f"{result.get('worker_exit')}, outcomes={result.get('outcomes')}, "
              f"handler_calls={result.get('handler_calls')}, acked={result.get('acked')}",
              file=sys.stderr)
        return CANNOT_DRIVE
    result.pop("table", None)
    print(RESULT_PREFIX + json.dumps({"value": float(value), "library": library,
                                      "pid": os.getpid(), "result": result}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
