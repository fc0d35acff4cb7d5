"""``python -m bench``: the full suite (``make bench``) or a quick pass (``--quick``).

Each case runs ``--repeat`` times on each backend; ``bench/results/<backend>_<case>.json``
keeps every run, the medians and the environment, and ``summary.md`` the table.
Example: ``python -m bench --backends sqlite --cases w3 --repeat 3``
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import os
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg

import conveyor
from conveyor import Conveyor

from . import _docs, _env, _report, w_burndown, w_enqueue, w_latency, w_steady, w_workers, w_workflow
from ._targets import Target
from .apps import register

DEFAULT_OUT = _env.DEFAULT_OUT
README = DEFAULT_OUT.parent.parent / "README.md"
Run = Callable[[Target], dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    run: Run
    params: dict[str, Any]
    #: The backends the case runs on (many workers is a PostgreSQL case).
    backends: tuple[str, ...] = ("sqlite", "postgres")


def _backlog(total: int, backlog: int, concurrency: int) -> Run:
    """Workload 6: the same burn-down on an empty table, then with the backlog present."""

    def run(target: Target) -> dict[str, Any]:
        empty = w_burndown.burndown(target, total, concurrency)
        full = w_burndown.burndown(target, total, concurrency, backlog=backlog)
        slowdown = 100 * (1 - full.get("jobs_per_s", 0) / empty.get("jobs_per_s", 1))
        return {**full, "jobs_per_s_empty": empty.get("jobs_per_s"),
                "slowdown_pct": round(slowdown, 1),
                "exactly_once": empty["exactly_once"] and full["exactly_once"]}

    return run


def _burndown(total: int, concurrency: int) -> Run:
    return lambda target: w_burndown.burndown(target, total, concurrency)


def plan(quick: bool, steady_seconds: float) -> list[Case]:
    """Every case of the issue's workloads 1-7 (8 is derived from 3 and 4)."""
    n = 2_000 if quick else 100_000
    bulk = 2_000 if quick else 1_000_000
    single = 200 if quick else 10_000
    lat = 20 if quick else 1_000
    window = 1 if quick else 10
    cases = [
        Case("w1_bulk_b1000", lambda t: w_enqueue.bulk(t, bulk, 1000), {"jobs": bulk}),
        Case("w1_bulk_b10000", lambda t: w_enqueue.bulk(t, bulk, 10_000), {"jobs": bulk}),
        Case("w2_single_t1", lambda t: w_enqueue.single(t, single, 1), {"jobs": single}),
        Case("w2_single_t8", lambda t: w_enqueue.single(t, single, 8), {"jobs": single}),
        Case("w1_bulk_ids_b10000", lambda t: w_enqueue.bulk_ids(t, bulk, 10_000),
             {"jobs": bulk, "returns": "ids"}),
        Case("w2_single_async_p1", lambda t: w_enqueue.single_async(t, single, 1),
             {"jobs": single, "producers": 1}),
        Case("w2_single_async_p100", lambda t: w_enqueue.single_async(t, single, 100),
             {"jobs": single, "producers": 100}),
    ]
    for c in (10,) if quick else (10, 100, 1000):
        cases.append(Case(f"w3_burndown_c{c}", _burndown(n, c), {"jobs": n, "concurrency": c}))
    cases += [
        Case("w3_burndown_sync_c100", lambda t: w_burndown.burndown(t, n, 100, "sync"),
             {"jobs": n, "concurrency": 100, "handlers": "sync"}),
        Case("w4_steady", lambda t: w_steady.steady(t, steady_seconds, 100, 5000, window),
             {"seconds": steady_seconds, "concurrency": 100, "ready": 5000, "window_s": window}),
        Case("w5_latency_in_process", lambda t: w_latency.in_process(t, lat, 0.01),
             {"jobs": lat, "spacing_s": 0.01}),
        Case("w5_latency_cross_process", lambda t: w_latency.cross_process(t, lat, 0.01),
             {"jobs": lat, "spacing_s": 0.01}),
        Case("w6_backlog_c100", _backlog(n, 3_000 if quick else 1_000_000, 100),
             {"jobs": n, "backlog_rows": 3_000 if quick else 1_000_000, "concurrency": 100}),
        Case("w7_retry_c100", lambda t: w_burndown.burndown(t, n, 100, "retry"),
             {"jobs": n, "concurrency": 100, "fail_first_attempt": "every even job"}),
    ]
    return cases + many_workers(quick) + workflow_cases(quick)


def many_workers(quick: bool) -> list[Case]:
    """Workload 9: 1..8 worker processes x concurrency 50 on one PostgreSQL."""
    n = 2_000 if quick else 100_000
    seconds, rate = (2.0, 1_000.0) if quick else (20.0, 2_000.0)
    pg = ("postgres",)
    cases = [Case(f"w9_workers_p{p}", functools.partial(w_workers.burndown, total=n,
                                                         processes=p, concurrency=50),
                  {"jobs": n, "processes": p, "concurrency": 50}, pg)
             for p in ((1, 2) if quick else (1, 2, 4, 8))]
    for p in (2,) if quick else (1, 8):
        cases.append(Case(f"w9_workers_steady_p{p}",
                          functools.partial(w_workers.steady, seconds=seconds, processes=p,
                                            concurrency=50, rate=rate, batch=100),
                          {"seconds": seconds, "processes": p, "concurrency": 50,
                           "jobs_per_s_enqueued": rate, "batch": 100}, pg))
    if not quick:  # one job per NOTIFY: every idle process wakes for every job
        cases.append(Case("w9_workers_steady_single_p8",
                          functools.partial(w_workers.steady, seconds=10.0, processes=8,
                                            concurrency=50, rate=500.0, batch=1),
                          {"seconds": 10.0, "processes": 8, "concurrency": 50,
                           "jobs_per_s_enqueued": 500.0, "batch": 1}, pg))
    return cases


def workflow_cases(quick: bool) -> list[Case]:
    """Workload 10: workflows and batches (bench/w_workflow.py)."""
    wide = 300 if quick else 10_000
    layers, width = (3, 100) if quick else (10, 1_000)
    count, size = (10, 20) if quick else (1_000, 100)
    small = 20 if quick else 100
    return [
        Case("w10_workflow_fan_in", lambda t: w_workflow.fan_in(t, wide, 100),
             {"width": wide, "concurrency": 100}),
        Case("w10_workflow_dag", lambda t: w_workflow.dag(t, layers, width, 100),
             {"layers": layers, "width": width, "concurrency": 100}),
        Case("w10_workflow_batches", lambda t: w_workflow.batches(t, count, size, 100),
             {"batches": count, "size": size, "concurrency": 100}),
        Case("w10_workflow_completion_cost",
             lambda t: w_workflow.completion_cost(t, wide, small, 100),
             {"jobs": wide, "small_fan_in": small, "concurrency": 100}),
    ]


def default_pg_url() -> str:
    """The machine's own server (``--pg-url local``)."""
    if os.path.exists("/var/run/postgresql/.s.PGSQL.5432"):
        return "postgresql://postgres@/conveyor_bench?host=/var/run/postgresql"
    return "postgresql://postgres@127.0.0.1:5432/conveyor_bench"


@contextlib.contextmanager
def postgres_url(choice: str | None) -> Iterator[str]:
    """The database the suite runs on. An explicit URL (``--pg-url`` or
    ``$CONVEYOR_BENCH_POSTGRES_URL``) is used as it is; ``local`` is the machine's own
    server; by default a private cluster with PostgreSQL's default settings is started
    (initdb, on the same disk) and removed afterwards, because the targets are stated
    for a default server and a shared one may be tuned otherwise (this machine's has
    autovacuum off, which no queue table survives for long)."""
    choice = choice or os.environ.get("CONVEYOR_BENCH_POSTGRES_URL") or ""
    if choice and choice != "local":
        yield choice
        return
    from tests._pg import PostgresUnavailable, ThrowawayCluster, find_pg_bindir

    bindir = find_pg_bindir()
    if choice == "local" or bindir is None:
        yield default_pg_url()
        return
    cluster = ThrowawayCluster(bindir, settings="")
    try:
        admin = cluster.start()
    except PostgresUnavailable as exc:
        print(f"no private PostgreSQL cluster ({exc}); using the local server", flush=True)
        yield default_pg_url()
        return
    try:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("CREATE DATABASE conveyor_bench")
        yield admin.rsplit("/", 1)[0] + "/conveyor_bench"
    finally:
        cluster.stop()


def derive_memory(out_dir: Path, backend: str, env: dict[str, Any]) -> None:
    """Workload 8: the worker's peak RSS in the burn-downs (3) and the steady state (4)."""
    docs = _report.load(out_dir)
    burn = [r.get("peak_rss_mb", 0) for (c, b), d in docs.items() if b == backend
            and c.startswith("w3_") for r in d["runs"]]
    steady = [r.get("peak_rss_mb", 0) for (c, b), d in docs.items() if b == backend
              and c.startswith("w4_") for r in d["runs"]]
    if burn or steady:
        run = {"peak_rss_mb_burndown": max(burn, default=0.0),
               "peak_rss_mb_steady": max(steady, default=0.0)}
        run["peak_rss_mb"] = max(run.values())
        # measured when the runs it is derived from were: one commit, all clean, or unknown
        stamps = [_report.evidence_of(d) for (c, b), d in docs.items() if b == backend
                  and c.startswith(("w3_", "w4_"))]
        commits = {commit for commit, _ in stamps}
        git = env["machine"]["git"]
        git["commit"] = commits.pop() if len(commits) == 1 else None
        git["clean"] = all(clean is True for _, clean in stamps) if git["commit"] else None
        _report.write_case(out_dir, "w8_memory", backend, [run], env,
                           "derived from the w3 and w4 runs")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--pg-url", default=None,
                        help="a database whose name contains 'bench' or 'test' (it is "
                             "emptied), or 'local' for this machine's server; default: a "
                             "private cluster with default settings")
    parser.add_argument("--cases", default="", help="comma-separated case id prefixes")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks, not figures")
    parser.add_argument("--steady-seconds", type=float, default=300.0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/conveyor-bench"))
    parser.add_argument("--summary-only", action="store_true",
                        help="only rewrite summary.md from the JSON files already in --out")
    parser.add_argument("--quiet-below", type=float, default=0.25, metavar="SHARE",
                        help="before each run, wait until the machine is less busy than this")
    parser.add_argument("--quiet-wait", type=float, default=0.0, metavar="SECONDS",
                        help="longest wait for a quiet machine per run (0: do not wait)")
    args = parser.parse_args(argv)
    if args.summary_only:
        publish(args.out)
        return 0
    _env.compile_bytecode(Path(conveyor.__file__).parent, Path(__file__).resolve().parent)
    wanted = [p for p in args.cases.split(",") if p]
    cases = [c for c in plan(args.quick, args.steady_seconds)
             if not wanted or any(c.id.startswith(p) for p in wanted)]
    for backend in [b for b in args.backends.split(",") if b]:
        with contextlib.ExitStack() as stack:
            target = (Target.sqlite(args.workdir) if backend == "sqlite" else Target.postgres(
                stack.enter_context(postgres_url(args.pg_url)), args.workdir))
            run_backend(target, cases, args)
            target.close()
            derive_memory(args.out, backend, environment(target, {}))
    publish(args.out)
    return 0


def publish(out: Path) -> None:
    """Rewrite everything the results publish: ``summary.md`` and, for the repository's
    own results folder, the README's performance table."""
    docs = _report.load(out)
    (out / "summary.md").write_text(_report.summary(docs))
    print(f"wrote {out / 'summary.md'}")
    if out.resolve() == DEFAULT_OUT and _report.update_readme(README, docs):
        print(f"wrote the performance table of {README}")
    if out.resolve() == DEFAULT_OUT:
        for name in _docs.update():
            print(f"wrote the figures of {name}")


def environment(target: Target, params: dict[str, Any]) -> dict[str, Any]:
    spec = register(Conveyor(target.url))["noop"].job(50_000).to_insert(1 << 20)
    return {"machine": _env.machine(), "database": target.settings(), "params": params,
            "payload_bytes": len(spec.args_json) + len(spec.kwargs_json),
            "payload": "noop(i): args [i], kwargs {}"}


def run_backend(target: Target, cases: list[Case], args: argparse.Namespace) -> None:
    for case in [c for c in cases if target.backend in c.backends]:
        before = _env.git_stamp()
        runs = []
        for i in range(args.repeat):
            busy = (_env.wait_quiet(args.quiet_below, args.quiet_wait) if args.quiet_wait
                    else None)
            began = time.monotonic()
            runs.append(case.run(target))
            runs[-1]["machine_busy_before"] = busy
            runs[-1]["loadavg_1m_after"] = round(os.getloadavg()[0], 2)
            print(f"{target.backend} {case.id} run {i + 1}/{args.repeat}: "
                  f"{_summary_line(runs[-1])} ({time.monotonic() - began:.1f}s)", flush=True)
        command = shlex.join(["python", "-m", "bench", "--backends", target.backend,
                              "--cases", case.id, "--repeat", str(args.repeat),
                              *(["--quick"] if args.quick else []),
                              *(["--steady-seconds", f"{args.steady_seconds:g}"]
                                if case.id.startswith("w4") else [])])
        env = environment(target, case.params)
        after = env["machine"]["git"]
        if before["commit"] != after["commit"] or before["clean"] is not True:
            # the checkout moved or the measured code was modified during the runs
            after["clean"] = False if after["clean"] is not None else None
        _report.write_case(args.out, case.id, target.backend, runs, env, command)


def _summary_line(result: dict[str, Any]) -> str:
    keys = ("jobs_per_s", "empty_claims_per_job", "connections_peak_total",
            "p50_ms", "p99_ms", "cpu_us_per_job", "round_trips_per_job",
            "exactly_once", "slowdown_pct", "peak_rss_mb", "enqueue_s", "ack_cost_us",
            "fan_in_large_vs_small")
    return " ".join(f"{k}={result[k]}" for k in keys if k in result)


if __name__ == "__main__":
    sys.exit(main())
