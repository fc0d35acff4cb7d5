"""``python -m bench.peers`` (``make bench-peers``): Conveyor and the peers of issue 29
in one run, on one machine, with the same workloads and the same definitions.

Workloads (no-op jobs; every run checks that each job ran exactly once, by counting
handler calls per job argument, or for the enqueue workloads that the store holds
exactly the jobs enqueued; a run that fails its check is a failure, never a figure):

  e2e      --jobs jobs pre-inserted, then drained by the system's worker (in the
           runner's process where the system allows); jobs/s from the worker's start
           to the end of the last handler call
  single   --single-jobs enqueues, one awaited call each (the async API where there
           is one); jobs/s
  bulk     --bulk-jobs jobs through the system's bulk API in one call, where it has one
  latency  --latency-jobs enqueues 10 ms apart with a worker running; enqueue-to-start
           p50 / p99 ms

Each peer runs in a venv of its own, made from the package registry and cached in
~/.cache/conveyor-bench-peers; Conveyor runs in this interpreter's venv with the tree
on PYTHONPATH. ``--render FILE`` prints the README's section from a result file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests import _evidence

import conveyor

from .. import _env
from . import _driver, _render, _services, _systems

#: What determines this tool's figures (the commit stamp says whether it was clean).
MEASURED = _evidence.PEERS_MEASURED
SIZES = {"e2e": 20_000, "single": 2_000, "bulk": 50_000, "latency": 200}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--peers", default=",".join(_systems.PEER_NAMES),
                   help="comma-separated peers (default: all): "
                        + ", ".join(_systems.PEER_NAMES))
    p.add_argument("--conveyor", default="sqlite,postgres",
                   help="Conveyor's backends in the run (empty: none)")
    p.add_argument("--jobs", type=int, default=SIZES["e2e"], help="e2e jobs per run")
    p.add_argument("--single-jobs", type=int, default=SIZES["single"])
    p.add_argument("--bulk-jobs", type=int, default=SIZES["bulk"])
    p.add_argument("--latency-jobs", type=int, default=SIZES["latency"])
    p.add_argument("--workloads", default=",".join(_systems.WORKLOADS))
    p.add_argument("--repeat", type=int, default=3, help="runs of each; medians are reported")
    p.add_argument("--pg-admin", default="private",
                   help="'private' (default): a cluster started for the run with PostgreSQL's "
                        "default settings; 'local': the server at 127.0.0.1:5432; or a URL "
                        "with the right to create databases. Each system gets its own "
                        "scratch database conveyor_peer_<system>")
    p.add_argument("--out", type=Path, default=None, help="write the result JSON here")
    p.add_argument("--render", type=Path, default=None, metavar="RESULT",
                   help="only print the README's section from this result file")
    return p


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def plan(args: argparse.Namespace) -> list[_systems.System]:
    """The systems of the run, each cut to the workloads asked for."""
    wanted = set(_names(args.workloads))
    unknown = wanted - set(_systems.WORKLOADS)
    if unknown:
        raise ValueError(f"unknown workloads {sorted(unknown)}")
    systems = _systems.select(_names(args.peers), _names(args.conveyor))
    order = [w for w in _systems.WORKLOADS if w in wanted]
    return [_replace(s, tuple(w for w in order if w in s.workloads)) for s in systems]


def _replace(system: _systems.System, workloads: tuple[str, ...]) -> _systems.System:
    import dataclasses

    return dataclasses.replace(system, workloads=workloads)


@contextlib.contextmanager
def _redis_if(needed: bool) -> Iterator[dict[str, Any] | None]:
    if not needed:
        yield None
        return
    with _services.redis() as info:
        yield info


def run(args: argparse.Namespace, log: Any = print,
        systems: list[_systems.System] | None = None) -> dict[str, Any]:
    """The whole run (of ``systems``, by default those ``args`` name); the result
    document (also written to ``--out``)."""
    systems = plan(args) if systems is None else systems
    began = time.monotonic()
    sizes = {"e2e": args.jobs, "single": args.single_jobs, "bulk": args.bulk_jobs,
             "latency": args.latency_jobs}
    machine = _env.machine()
    machine["git"] = _evidence.stamp(MEASURED)
    with contextlib.ExitStack() as stack:
        redis = stack.enter_context(_redis_if(any("redis" in s.needs for s in systems)))
        pg_admin, pg_source = stack.enter_context(_services.postgres(args.pg_admin, log))
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(
            prefix="conveyor-bench-peers-")))
        ctx = _driver.Context(pg_admin, redis, workdir, sizes, log=log)
        systems_out = _driver.measure(systems, ctx, args.repeat)
        postgres = {**_env.postgres_settings(pg_admin), "source": pg_source}
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"), "at": machine["at"],
        "conveyor_commit": machine["git"].get("commit"), "git": machine["git"],
        "machine": machine,
        "services": {"postgres": postgres, "redis": redis},
        "params": {"jobs": args.jobs, "single_jobs": args.single_jobs,
                   "bulk_jobs": args.bulk_jobs, "latency_jobs": args.latency_jobs,
                   "spacing_ms": 10, "repeat": args.repeat},
        "command": "python -m bench.peers " + " ".join(sys.argv[1:]),
        "systems": systems_out, "failures": _driver.failures(systems_out),
        "took_s": round(time.monotonic() - began, 1),
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        log(f"wrote {args.out}")
    return result


def render(path: Path) -> str:
    """The README's "Conveyor beside the peers" section, from a result file."""
    result: dict[str, Any] = json.loads(path.read_text())
    return _render.readme_section(result)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.render:
        print(render(args.render))
        return 0
    try:
        plan(args)
    except ValueError as exc:
        parser().error(str(exc))
    _env.compile_bytecode(Path(conveyor.__file__).parent, Path(__file__).resolve().parents[1])
    result = run(args)
    print()
    print(_render.table(result))
    print()
    print(_render.ratio_line(result))
    for failure in result["failures"]:
        print(f"FAILED {failure['system']} {failure['workload'] or ''}: {failure['reason']}")
    print(f"took {result['took_s']:.0f} s")
    # a peer's failure is a finding about the peer (reported above and in the file);
    # Conveyor's is a failure of this run
    return 1 if any(f["system"].startswith("conveyor-") for f in result["failures"]) else 0


if __name__ == "__main__":
    sys.exit(main())
