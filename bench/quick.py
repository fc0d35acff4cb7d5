"""``python -m bench.quick`` (``make bench-quick``): the README's performance table in
about ten minutes, with the floors measured in the same run.

The README's cases on both backends at smaller sizes (``SIZES``), medians of 3, then the
floors on the same databases (PostgreSQL: Conveyor's claim/ack statements in a raw
psycopg loop, its COPY statements, insert-NOTIFY-claim, from ``bench/floor.py``, and its
one-job insert sent serially, from ``bench/floor_enqueue.py``, held against pgqueuer's
single enqueue; SQLite:
the CPU per row of the insert, claim and ack statements, from ``bench/probes.py``),
medians of 3, and each headline figure over its floor; then pgqueuer beside Conveyor
through ``bench.peers`` (the same workloads at the same sizes, medians of 3, and issue
29's ratios). It prints the tables; it writes
no file the repository publishes (the result files go to a temporary directory, or to
``--out``), so the README and ``bench/results`` keep what ``make bench`` measured.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests import _evidence

import conveyor

from . import (
    _env,
    _report,
    floor,
    floor_enqueue,
    probes,
    w_burndown,
    w_enqueue,
    w_latency,
    w_steady,
)
from .__main__ import Case, derive_memory, environment, postgres_url, run_backend
from ._targets import Target
from .peers import _render as peers_render
from .peers.__main__ import parser as peers_parser
from .peers.__main__ import plan as peers_plan
from .peers.__main__ import run as run_peers

#: Sizes that keep the whole run near ten minutes on a 2-core machine.
SIZES = {"burndown": 20_000, "bulk": 50_000, "single": 2_000, "latency": 200,
         "steady_s": 15, "backlog": 100_000, "floor_rows": 20_000}
PEERS_NOTE = ("peers: pgqueuer beside Conveyor, measured in this run by `bench.peers`'s runners "
              "(every system in process, through its own API, on a private cluster of its own, so "
              "Conveyor's figures there differ from the table's worker-process burn-downs); every "
              "peer of issue 29: `make bench-peers`")


def cases() -> list[Case]:
    """The cases the README's table is made of, at ``SIZES``."""
    n, bulk, single, lat = SIZES["burndown"], SIZES["bulk"], SIZES["single"], SIZES["latency"]
    steady, backlog = SIZES["steady_s"], SIZES["backlog"]
    out = [
        Case("w1_bulk_b1000", lambda t: w_enqueue.bulk(t, bulk, 1000), {"jobs": bulk}),
        Case("w1_bulk_b10000", lambda t: w_enqueue.bulk(t, bulk, 10_000), {"jobs": bulk}),
        Case("w2_single_t1", lambda t: w_enqueue.single(t, single, 1), {"jobs": single}),
        Case("w2_single_async_p1", lambda t: w_enqueue.single_async(t, single, 1),
             {"jobs": single, "producers": 1}),
    ]
    for c in (10, 100, 1000):
        out.append(Case(f"w3_burndown_c{c}", functools.partial(
            w_burndown.burndown, total=n, concurrency=c), {"jobs": n, "concurrency": c}))
    out += [
        Case("w4_steady", lambda t: w_steady.steady(t, steady, 100, 5000, 1),
             {"seconds": steady, "concurrency": 100, "ready": 5000, "window_s": 1}),
        Case("w5_latency_in_process", lambda t: w_latency.in_process(t, lat, 0.01),
             {"jobs": lat, "spacing_s": 0.01}),
        Case("w5_latency_cross_process", lambda t: w_latency.cross_process(t, lat, 0.01),
             {"jobs": lat, "spacing_s": 0.01}),
        Case("w6_backlog_c100", _backlog_case(n, backlog), {"jobs": n, "backlog_rows": backlog,
                                                            "concurrency": 100}),
    ]
    return out


def _backlog_case(total: int, backlog: int) -> Callable[[Target], dict[str, Any]]:
    from .__main__ import _backlog

    return _backlog(total, backlog, 100)


def postgres_floors(target: Target, repeat: int) -> dict[str, Any]:
    """Medians of ``repeat`` runs of the three PostgreSQL floors, on ``target``."""
    claim = [floor.claim_ack_loop(target, SIZES["floor_rows"], (1000,)) for _ in range(repeat)]
    copy = [floor.copy_batches(target, 10_000, 5) for _ in range(repeat)]
    latency = [floor.enqueue_to_claim(target, SIZES["latency"])["enqueue_to_claimed"]
               for _ in range(repeat)]
    single = [floor_enqueue.single_insert(target, SIZES["single"]) for _ in range(repeat)]
    if not all(r[kind]["exactly_once"] for r in single for kind in ("async", "sync")):
        raise RuntimeError(f"the single-enqueue floor did not store every row: {single}")
    return {
        "single_async_jobs_per_s": statistics.median(r["async"]["jobs_per_s"] for r in single),
        "single_sync_jobs_per_s": statistics.median(r["sync"]["jobs_per_s"] for r in single),
        "single_async_cpu_us_per_job": statistics.median(
            r["async"]["client_cpu_us_per_job"] for r in single),
        "claim_ack_jobs_per_s": statistics.median(
            r["overlapped_b1000"]["jobs_per_s"] for r in claim),
        "copy_jobs_per_s": statistics.median(r["jobs_per_s"] for r in copy),
        "latency_p50_ms": statistics.median(r["p50_ms"] for r in latency),
        "latency_p99_ms": statistics.median(r["p99_ms"] for r in latency),
    }


def sqlite_floors(repeat: int) -> dict[str, Any]:
    """Medians of ``repeat`` runs of the SQLite statements' CPU per row, as jobs/s."""
    runs = [probes._sqlite_once(None, SIZES["floor_rows"]) for _ in range(repeat)]
    insert, claim, ack = (statistics.median(r[k] for r in runs)
                          for k in ("insert_us", "claim_us", "ack_us"))
    return {"claim_ack_jobs_per_s": round(1e6 / (claim + ack)),
            "copy_jobs_per_s": round(1e6 / insert)}


def relabel(table: str) -> str:
    """The README's row labels name the full sizes; say the quick ones instead."""
    return (table
            .replace("burn-down of 100,000 pre-inserted jobs",
                     f"burn-down of {SIZES['burndown']:,} pre-inserted jobs")
            .replace("steady state, 5 min", f"steady state, {SIZES['steady_s']} s")
            .replace("1,000,000-row backlog", f"{SIZES['backlog']:,}-row backlog")
            .replace("no 10-s window", "no 1-s window"))


#: Issue 29's single-enqueue target: Conveyor's ``enqueue_async`` over pgqueuer's.
SINGLE_TARGET = 1.5


def floors_table(docs: dict[tuple[str, str], dict[str, Any]],
                 floors: dict[str, dict[str, Any]],
                 peer_single: float | None = None,
                 peer_latency: tuple[float, float] | None = None) -> str:
    """Each floor and the headline figure over it, per backend (same run).
    ``peer_single``: pgqueuer's single enqueue/s in this run, which the single-enqueue
    floor is held against (issue 29 gives a target up only where its floor is below it);
    ``peer_latency``: pgqueuer's enqueue-to-start p50 and p99 (ms), which the latency
    floor is held against the same way."""
    def cell(backend: str, fn: Callable[[dict[str, Any], dict[str, Any]], str]) -> str:
        f = floors.get(backend)
        best = _report._best_burndown(docs, backend)
        if not f or best is None:
            return "-"
        medians = {"best": docs[(best, backend)]["median"]}
        for case in ("w1_bulk_b1000", "w1_bulk_b10000", "w2_single_async_p1",
                     "w5_latency_in_process"):
            if (case, backend) in docs:
                medians[case] = docs[(case, backend)]["median"]
        try:
            return fn(f, medians)
        except (KeyError, ZeroDivisionError):
            return "-"

    rows: list[tuple[str, Callable[[dict[str, Any], dict[str, Any]], str]]] = [
        ("burn-down floor: claim+ack statements alone (jobs/s)",
         lambda f, m: f"{f['claim_ack_jobs_per_s']:,.0f}"),
        ("best burn-down / floor (target >= 0.7)",
         lambda f, m: f"{m['best']['jobs_per_s'] / f['claim_ack_jobs_per_s']:.2f}"),
        ("bulk floor: insert (SQLite) / COPY (PostgreSQL) alone (jobs/s)",
         lambda f, m: f"{f['copy_jobs_per_s']:,.0f}"),
        ("enqueue_many, batches of 10,000 / floor (target >= 0.8)",
         lambda f, m: f"{m['w1_bulk_b10000']['jobs_per_s'] / f['copy_jobs_per_s']:.2f}"),
        ("enqueue-to-start floor p50 / p99 (ms)",
         lambda f, m: f"{f['latency_p50_ms']:.1f} / {f['latency_p99_ms']:.1f}"),
        ("single-enqueue floor: `job_insert_one` alone, one call at a time, psycopg async / "
         "sync (jobs/s)",
         lambda f, m: f"{f['single_async_jobs_per_s']:,.0f} / {f['single_sync_jobs_per_s']:,.0f}"),
        ("single `enqueue_async`, one call at a time / async floor",
         lambda f, m: f"{m['w2_single_async_p1']['jobs_per_s'] / f['single_async_jobs_per_s']:.2f}"),
        ("client CPU per single enqueue: `enqueue_async` / async floor (µs)",
         lambda f, m: f"{m['w2_single_async_p1']['cpu_us_per_job']:.0f} / "
                      f"{f['single_async_cpu_us_per_job']:.0f}"),
        (f"async single-enqueue floor / pgqueuer's single enqueue (target >= {SINGLE_TARGET:g}x "
         "pgqueuer's)", lambda f, m: _single_verdict(f["single_async_jobs_per_s"], peer_single)),
        (f"enqueue-to-start floor / pgqueuer's, p50 (target <= {LATENCY_TARGETS[0]:g}x) and "
         f"p99 (target <= {LATENCY_TARGETS[1]:g}x)",
         lambda f, m: _latency_verdict(f, peer_latency)),
    ]
    lines = ["| floor, same run | SQLite | PostgreSQL |", "|---|---:|---:|"]
    for label, fn in rows:
        lines.append(f"| {label} | {cell('sqlite', fn)} | {cell('postgres', fn)} |")
    return "\n".join(lines)


#: Issue 29's enqueue-to-start targets: Conveyor's p50 and p99 over pgqueuer's, at most.
LATENCY_TARGETS = (0.7, 1.0)


def _latency_verdict(f: dict[str, Any], peer: tuple[float, float] | None) -> str:
    """The latency floor over pgqueuer's p50 and p99: a floor above its bound means no
    Conveyor meets that target on this machine (given up on this evidence)."""
    if not peer or not peer[0] or not peer[1]:
        raise ZeroDivisionError("no pgqueuer figure in this run")  # the cell says "-"
    parts = []
    for name, mine, theirs, bound in (("p50", f["latency_p50_ms"], peer[0], LATENCY_TARGETS[0]),
                                      ("p99", f["latency_p99_ms"], peer[1], LATENCY_TARGETS[1])):
        ratio = mine / theirs
        parts.append(f"{name} {ratio:.2f}x: " + ("the floor itself is above the target: given "
                                                  "up on this evidence" if ratio > bound
                                                  else "the floor is within it: work left"))
    return "; ".join(parts)


def _single_verdict(floor_rate: float, peer_single: float | None) -> str:
    """The floor over pgqueuer's single enqueue, and what that says of the target: below
    it, no Conveyor can meet it on this machine (the target is given up on this
    evidence); at or above it, the distance is Conveyor's own work left."""
    if not peer_single:
        raise ZeroDivisionError("no pgqueuer figure in this run")  # the cell says "-"
    ratio = floor_rate / peer_single
    verdict = ("the floor itself is below the target: given up on this evidence"
               if ratio < SINGLE_TARGET else "the floor is above the target: work left")
    return f"{ratio:.2f}x: {verdict}"


def peers(repeat: int, pg_admin: str | None) -> dict[str, Any]:
    """pgqueuer and Conveyor (PostgreSQL; SQLite's e2e) through ``bench.peers`` at
    ``SIZES``."""
    argv = ["--peers", "pgqueuer", "--jobs", str(SIZES["burndown"]),
            "--single-jobs", str(SIZES["single"]), "--bulk-jobs", str(SIZES["bulk"]),
            "--latency-jobs", str(SIZES["latency"]), "--repeat", str(repeat)]
    args = peers_parser().parse_args(argv + (["--pg-admin", pg_admin] if pg_admin else []))
    # issue 29's ratios need SQLite's e2e only; its other figures are in the table above
    systems = [dataclasses.replace(s, workloads=("e2e",)) if s.key == "conveyor-sqlite" else s
               for s in peers_plan(args)]
    return run_peers(args, log=lambda line: print(f"peers: {line}", flush=True),
                     systems=systems)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quick", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--pg-url", default=None, help="as for `python -m bench`")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None,
                        help="keep the result files here (default: a temporary directory)")
    parser.add_argument("--no-peers", action="store_true", help="leave pgqueuer out")
    parser.add_argument("--peers-pg-admin", default=None,
                        help="as `python -m bench.peers --pg-admin` (default: a private "
                             "cluster with PostgreSQL's default settings)")
    parser.add_argument("--save", type=Path, default=None,
                        help="write the tables, the figures and the machine (with its "
                             "commit) to this JSON file, which the README's bench-quick "
                             "section is rendered from (make bench-quick: "
                             "bench/results/quick.json)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply every size (a smoke run: 0.05)")
    args = parser.parse_args(argv)
    if args.scale != 1.0:
        SIZES.update({k: max(3, int(v * args.scale)) for k, v in SIZES.items()})
    began = time.monotonic()
    _env.compile_bytecode(Path(conveyor.__file__).parent, Path(__file__).resolve().parent)
    machine = _env.machine()
    machine["git"] = _evidence.stamp(_evidence.QUICK_MEASURED)
    floors: dict[str, dict[str, Any]] = {}
    with contextlib.ExitStack() as stack:
        out = args.out or Path(stack.enter_context(tempfile.TemporaryDirectory(
            prefix="conveyor-bench-quick-")))
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(
            prefix="conveyor-bench-quick-db-")))
        suite = argparse.Namespace(repeat=args.repeat, quiet_wait=0.0, quiet_below=1.0,
                                   quick=False, steady_seconds=float(SIZES["steady_s"]),
                                   out=out)
        for backend in [b for b in args.backends.split(",") if b]:
            with contextlib.ExitStack() as db:
                target = (Target.sqlite(workdir) if backend == "sqlite" else Target.postgres(
                    db.enter_context(postgres_url(args.pg_url)), workdir))
                run_backend(target, cases(), suite)
                floors[backend] = (sqlite_floors(args.repeat) if backend == "sqlite"
                                   else postgres_floors(target, args.repeat))
                print(f"{backend} floors: {floors[backend]}", flush=True)
                target.close()
                derive_memory(out, backend, environment(target, {}))
        peer_result = None if args.no_peers else peers(args.repeat, args.peers_pg_admin)
        docs = _report.load(out)
        pgq = (peer_result or {}).get("systems", {}).get(peers_render.PGQUEUER)
        p50, p99 = (peers_render.median(pgq, "latency", k) for k in ("p50_ms", "p99_ms"))
        tables = {"readme": relabel(_report.readme_table(docs)),
                  "floors": floors_table(docs, floors,
                                         peers_render.median(pgq, "single", "jobs_per_s"),
                                         (p50, p99) if p50 and p99 else None)}
        print(f"\nThe README's table at bench-quick sizes ({SIZES['burndown']:,}-job burn-downs"
              f", {SIZES['steady_s']} s steady state), not `make bench`'s:")
        print(tables["readme"])
        print()
        print(tables["floors"])
        print()
        print(f"sizes: {SIZES}; medians of {args.repeat}; targets are stated for "
              "`make bench`'s sizes")
        if peer_result is not None:
            tables["peers"] = peers_render.table(peer_result)
            tables["ratios"] = peers_render.ratio_line(peer_result)
            print()
            print(tables["peers"])
            print()
            print(tables["ratios"])
            for failure in peer_result["failures"]:
                print(f"FAILED {failure['system']} {failure['workload'] or ''}: "
                      f"{failure['reason']}")
        print(PEERS_NOTE)
        took = time.monotonic() - began
        print(f"took {took:.0f} s")
        if args.save is not None:
            args.save.write_text(json.dumps({
                "date": time.strftime("%Y-%m-%d"), "machine": machine, "sizes": SIZES,
                "repeat": args.repeat, "took_s": round(took), "floors": floors,
                "tables": tables,
                "peers_failures": peer_result["failures"] if peer_result else [],
            }, indent=2, default=str) + "\n", encoding="utf-8")
            print(f"wrote {args.save}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
