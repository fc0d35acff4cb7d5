"""What a result file says, as markdown: the run's table (printed by every run) and
the README's "Conveyor beside the peers" section with issue 29's ratios."""

from __future__ import annotations

from typing import Any

SQLITE, POSTGRES, PGQUEUER = "conveyor-sqlite", "conveyor-postgres", "pgqueuer"


def label(entry: dict[str, Any]) -> str:
    """The system's label with the version it ran (or, when it never ran, its pin)."""
    dist = entry["label"].split(" ", 1)[0].lower()
    pins = dict(p.split("==", 1) for p in entry.get("packages", []) if "==" in p)
    pins = {name.split("[")[0]: version for name, version in pins.items()}
    version = (entry.get("versions") or {}).get(dist) or pins.get(dist, "")
    return str(entry["label"]).replace("{version}", version).replace("  ", " ")


def median(entry: dict[str, Any] | None, workload: str, key: str) -> float | None:
    if not entry:
        return None
    value = entry.get("workloads", {}).get(workload, {}).get("median", {}).get(key)
    return float(value) if value is not None else None


def _failed_note(entry: dict[str, Any], workloads: tuple[str, ...]) -> str:
    failed = [(w, entry["workloads"][w]) for w in workloads if w in entry.get("workloads", {})]
    notes = [f"{agg['failed_runs']} of {agg['failed_runs'] + agg['ok_runs']} failed"
             for _, agg in failed if agg["failed_runs"]]
    return f" ({'; '.join(notes)})" if notes else ""


def _size_note(entry: dict[str, Any], workload: str, size: int | None) -> str:
    """The size a peer ran when it was capped below the run's (``System.caps``)."""
    ran = {r.get("jobs") for r in entry["workloads"][workload]["runs"] if r.get("jobs")}
    return f" ({min(ran):,} jobs)" if size and ran and min(ran) != size else ""


def _rate_cell(entry: dict[str, Any], workload: str, size: int | None = None) -> str:
    if workload not in entry.get("workloads", {}):
        return "-"
    value = median(entry, workload, "jobs_per_s")
    cell = f"{value:,.0f}" if value is not None else "failed"
    return cell + _size_note(entry, workload, size) + _failed_note(entry, (workload,))


def _latency_cell(entry: dict[str, Any]) -> str:
    if "latency" not in entry.get("workloads", {}):
        return "-"
    p50, p99 = median(entry, "latency", "p50_ms"), median(entry, "latency", "p99_ms")
    cell = f"{p50:.1f} / {p99:.1f}" if p50 is not None and p99 is not None else "failed"
    return cell + _failed_note(entry, ("latency",))


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.1f}x" if a and b else "-"


def _ratio_cell(systems: dict[str, Any], key: str) -> str:
    """Conveyor's e2e over this system's: PostgreSQL / SQLite."""
    if key.startswith("conveyor-"):
        return ""
    mine = median(systems[key], "e2e", "jobs_per_s")
    pg = median(systems.get(POSTGRES), "e2e", "jobs_per_s")
    lite = median(systems.get(SQLITE), "e2e", "jobs_per_s")
    return f"{_ratio(pg, mine)} / {_ratio(lite, mine)}"


def table(result: dict[str, Any]) -> str:
    """system | e2e | single | bulk | p50/p99 | Conveyor's e2e over the system's."""
    params = result.get("params", {})
    lines = [
        f"| system | e2e jobs/s ({params.get('jobs', 0):,}) "
        f"| single enqueue/s ({params.get('single_jobs', 0):,}) "
        f"| bulk enqueue/s ({params.get('bulk_jobs', 0):,}) "
        f"| enqueue→start p50 / p99 ms ({params.get('latency_jobs', 0):,}) "
        "| Conveyor e2e ÷ this (PostgreSQL / SQLite) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    systems = result.get("systems", {})
    for key, entry in systems.items():
        if entry.get("failed"):
            lines.append(f"| {label(entry)} | failed: {entry['failed'][:80]} | | | | |")
            continue
        sizes = {w: params.get(k) for w, k in (("e2e", "jobs"), ("single", "single_jobs"),
                                               ("bulk", "bulk_jobs"))}
        lines.append(f"| {label(entry)} | {_rate_cell(entry, 'e2e', sizes['e2e'])} "
                     f"| {_rate_cell(entry, 'single', sizes['single'])} "
                     f"| {_rate_cell(entry, 'bulk', sizes['bulk'])} "
                     f"| {_latency_cell(entry)} | {_ratio_cell(systems, key)} |")
    return "\n".join(lines)


#: Issue 29's targets: (what, Conveyor system, workload, key, want "ge"/"le", bound).
TARGETS = (
    ("PostgreSQL e2e", POSTGRES, "e2e", "jobs_per_s", "ge", 4.0),
    ("SQLite e2e", SQLITE, "e2e", "jobs_per_s", "ge", 8.0),
    ("bulk on PostgreSQL", POSTGRES, "bulk", "jobs_per_s", "ge", 3.0),
    ("single enqueue_async on PostgreSQL", POSTGRES, "single", "jobs_per_s", "ge", 1.5),
    ("p50 on PostgreSQL", POSTGRES, "latency", "p50_ms", "le", 0.7),
    ("p99 on PostgreSQL", POSTGRES, "latency", "p99_ms", "le", 1.0),
)


def target_ratios(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each of issue 29's ratios to pgqueuer: value, bound, met (None: not measured)."""
    systems = result.get("systems", {})
    peer = systems.get(PGQUEUER)
    out = []
    for what, key, workload, figure, want, bound in TARGETS:
        mine, theirs = median(systems.get(key), workload, figure), median(peer, workload, figure)
        value = mine / theirs if mine is not None and theirs else None
        met = None if value is None else (value >= bound if want == "ge" else value <= bound)
        out.append({"what": what, "ratio": value, "bound": bound, "want": want, "met": met})
    return out


def ratio_line(result: dict[str, Any]) -> str:
    parts = []
    for t in target_ratios(result):
        sign = ">=" if t["want"] == "ge" else "<="
        value = "not measured" if t["ratio"] is None else f"{t['ratio']:.2f}x"
        verdict = {None: "", True: ": met", False: ": missed"}[t["met"]]
        parts.append(f"{t['what']} {value} pgqueuer's (target {sign} {t['bound']:g}{verdict})")
    return "Issue 29's targets, Conveyor over pgqueuer in this run: " + "; ".join(parts) + "."


def machine_line(result: dict[str, Any]) -> str:
    m = result.get("machine", {})
    services = result.get("services", {})
    pg = services.get("postgres", {})
    redis = services.get("redis") or {}
    where = "a private cluster, default settings" if "private" in pg.get("source", "") else (
        "non-default settings: " + ", ".join(f"{k}={v}" for k, v in sorted(
            pg.get("non_default_settings", {}).items()) if k in ("autovacuum", "fsync",
                                                                 "synchronous_commit")))
    return (f"{m.get('cores')}-core {m.get('cpu')}, Python {m.get('python')}, "
            f"PostgreSQL {pg.get('server_version')} ({pg.get('connection')}, {where}), "
            f"Redis {redis.get('version', 'not used')}, SQLite {m.get('sqlite')}; "
            f"load average {m.get('loadavg_1m')} at the start")


def readme_section(result: dict[str, Any]) -> str:
    """The README's "Conveyor beside the peers" table, from a result file."""
    params = result.get("params", {})
    commit = (result.get("conveyor_commit") or "unknown")[:7]
    repeat = params.get("repeat") or 1
    runs = "one run each" if repeat == 1 else f"medians of {repeat} runs"
    head = (f"Measured {result.get('date', '?')} on Conveyor `{commit}` by `make bench-peers` "
            f"(`python -m bench.peers`): every system in the same run on one machine "
            f"({machine_line(result)}); no-op jobs, {runs}, each system in a venv of its own "
            "at its documented defaults except where its label names a setting (each "
            "system's settings, versions and the reasons are in `bench/results/peers.json`); "
            "every run checked that each job ran (or, for the enqueue workloads, was stored) "
            "exactly once.")
    lines = [head, "", table(result), "", ratio_line(result)]
    fails = result.get("failures", [])
    if fails:
        lines += ["", "Failed runs (no figure taken from them): " + "; ".join(
            f"{f['system']} {f['workload'] or ''} {f.get('run', '')}: {f['reason'][:120]}"
            .replace("  ", " ") for f in fails) + "."]
    return "\n".join(lines)
