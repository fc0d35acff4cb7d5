"""Medians of repeated runs, one JSON file per case, and ``summary.md`` with targets."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from tests import _evidence

from ._report_workers import workers_table

#: (case id prefix, backend) -> (metric, "min"/"max", bound, label): the issue's targets.
TARGETS: dict[tuple[str, str], list[tuple[str, str, float, str]]] = {
    # issue 15's targets (this machine, PostgreSQL with default settings)
    ("w1_bulk", "sqlite"): [("jobs_per_s", "min", 120_000, ">= 120,000 jobs/s")],
    ("w1_bulk", "postgres"): [("jobs_per_s", "min", 150_000, ">= 150,000 jobs/s")],
    ("w2_single_t1", "sqlite"): [("jobs_per_s", "min", 10_000, ">= 10,000 jobs/s")],
    ("w2_single_t1", "postgres"): [("jobs_per_s", "min", 4_000, ">= 4,000 jobs/s")],
    ("w2_single_async_p100", "postgres"): [
        ("jobs_per_s", "min", 5_000, ">= 5,000 jobs/s (one event loop)")],
    ("w3_burndown", "sqlite"): [("jobs_per_s", "min", 70_000, ">= 70,000 jobs/s (best c)")],
    ("w3_burndown", "postgres"): [("jobs_per_s", "min", 45_000, ">= 45,000 jobs/s (best c)")],
    ("w4_steady", "sqlite"): [("jobs_per_s", "min", 40_000, ">= 40,000 jobs/s"),
                              ("last_vs_first_third", "min", 0.9, "no downward trend"),
                              ("worst_window_vs_median", "min", 0.8,
                               "no 10-s window below 80% of the median")],
    ("w4_steady", "postgres"): [("jobs_per_s", "min", 25_000, ">= 25,000 jobs/s"),
                                ("last_vs_first_third", "min", 0.9, "no downward trend"),
                                ("worst_window_vs_median", "min", 0.8,
                                 "no 10-s window below 80% of the median")],
    ("w5_latency_in", "postgres"): [("p50_ms", "max", 1.5, "p50 <= 1.5 ms"),
                                    ("p99_ms", "max", 5, "p99 <= 5 ms")],
    ("w5_latency_in", "sqlite"): [("p50_ms", "max", 2, "p50 <= 2 ms"),
                                  ("p99_ms", "max", 10, "p99 <= 10 ms")],
    ("w5_latency_cross", "sqlite"): [("p50_ms", "max", 10, "p50 <= 10 ms"),
                                     ("p99_ms", "max", 50, "p99 <= 50 ms")],
    ("w5_latency_cross", "postgres"): [("p50_ms", "max", 3, "p50 <= 3 ms"),
                                       ("p99_ms", "max", 15, "p99 <= 15 ms")],
    ("w6_backlog", "sqlite"): [("slowdown_pct", "max", 15, "slowdown <= 15%")],
    ("w6_backlog", "postgres"): [("slowdown_pct", "max", 15, "slowdown <= 15%")],
    ("w8_memory", "sqlite"): [("peak_rss_mb", "max", 150, "peak RSS <= 150 MB")],
    ("w8_memory", "postgres"): [("peak_rss_mb", "max", 150, "peak RSS <= 150 MB")],
    # workload 10: a completion's cost must not grow with the size of its fan-in
    ("w10_workflow_dag", "sqlite"): [
        ("per_job_vs_two_layers", "max", 2.0, "10 layers cost per job <= 2 x 2 layers")],
    ("w10_workflow_dag", "postgres"): [
        ("per_job_vs_two_layers", "max", 2.0, "10 layers cost per job <= 2 x 2 layers")],
    ("w10_workflow_completion_cost", "sqlite"): [
        ("fan_in_large_vs_small", "max", 1.25, "fan-in of 10,000 drains within 25% of 100s")],
    ("w10_workflow_completion_cost", "postgres"): [
        ("fan_in_large_vs_small", "max", 1.25, "fan-in of 10,000 drains within 25% of 100s")],
}


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of every numeric field; booleans must hold in every run."""
    out: dict[str, Any] = {}
    for key in runs[0]:
        values = [run.get(key) for run in runs]
        numbers = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        if all(isinstance(v, bool) for v in values):
            out[key] = all(values)
        elif len(numbers) == len(values):
            out[key] = round(statistics.median(numbers), 3)
    return out


def write_case(out_dir: Path, case: str, backend: str, runs: list[dict[str, Any]],
               env: dict[str, Any], command: str) -> dict[str, Any]:
    doc = {"case": case, "backend": backend, "command": command, "environment": env,
           "runs": runs, "median": median_of(runs)}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{backend}_{case}.json").write_text(json.dumps(doc, indent=2, default=str))
    return doc


def load(out_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    docs = {}
    for path in sorted(out_dir.glob("*.json")):
        doc = json.loads(path.read_text())
        if "case" in doc:  # probes.json sits beside the cases
            docs[(doc["case"], doc["backend"])] = doc
    return docs


def verdict(case: str, backend: str, median: dict[str, Any]) -> str:
    checks = next((t for (prefix, b), t in TARGETS.items()
                   if b == backend and case.startswith(prefix)), [])
    marks = []
    for metric, kind, bound, label in checks:
        value = median.get(metric)
        if value is None:
            continue
        ok = value >= bound if kind == "min" else value <= bound
        marks.append(f"{'met' if ok else 'MISSED'}: {label}")
    return "; ".join(marks)


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return "-" if value is None else str(value)


COLUMNS = ("jobs_per_s", "p50_ms", "p99_ms", "cpu_us_per_job", "round_trips_per_job",
           "exactly_once", "peak_rss_mb", "slowdown_pct", "last_vs_first_third",
           "enqueue_s", "ack_cost_us", "loadavg_1m_after")


def evidence_of(doc: dict[str, Any]) -> tuple[str | None, bool | None]:
    """The commit a result was measured on and whether its measured code was clean (None:
    not recorded; files written before ``clean`` existed have an unreliable ``dirty``)."""
    git = doc.get("environment", {}).get("machine", {}).get("git") or {}
    clean = git.get("clean")
    return git.get("commit") or None, clean if isinstance(clean, bool) else None


def staleness(doc: dict[str, Any]) -> str | None:
    return _evidence.staleness(*evidence_of(doc), _evidence.BENCH_MEASURED)


def summary(docs: dict[tuple[str, str], dict[str, Any]]) -> str:
    """The markdown table: one row per case and backend, medians, the command, targets,
    and the commit each row was measured on (stale rows marked, counted in the header)."""
    lines = ["# Benchmark results", "",
             "Medians of the runs in each JSON file (`runs` has every run). Commands run from "
             "the repository root. Regenerate with `make bench`. Each row names the commit it "
             "was measured on; a row is *stale* when that commit is unknown, its measured "
             f"code ({_evidence.describe(_evidence.BENCH_MEASURED)}) was modified, "
             "or differs from this commit's.", ""]
    stale = {key: staleness(doc) for key, doc in docs.items()}
    lines += [_evidence.header(sum(r is not None for r in stale.values()), len(docs),
                               "make bench"), ""]
    envs = {doc["environment"]["machine"]["cpu"] for doc in docs.values()}
    if docs:
        machine = next(iter(docs.values()))["environment"]["machine"]
        lines += [f"Machine: {', '.join(sorted(envs))}, {machine['cores']} cores, Python "
                  f"{machine['python']}, SQLite {machine['sqlite']}, psycopg "
                  f"{machine['psycopg']} (libpq {machine['libpq']}).", ""]
    head = ["case", "backend", "runs", *COLUMNS, "target", "commit", "status"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (case, backend), doc in sorted(docs.items()):
        med = doc["median"]
        cells = [case, backend, str(len(doc["runs"]))]
        cells += [_fmt(med.get(c)) for c in COLUMNS]
        cells.append(verdict(case, backend, med))
        cells += [_evidence.short(evidence_of(doc)[0]),
                  _evidence.status_cell(stale[(case, backend)])]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append(workers_table(docs))
    lines += ["", "## Commands", ""]
    for (case, backend), doc in sorted(docs.items()):
        lines.append(f"- `{case}` ({backend}): `{doc['command']}`")
    return "\n".join(lines) + "\n" + _appendix()


def _appendix() -> str:
    """The hand-written analysis (bench/analysis.md) and the database floors measured by
    ``python -m bench.probes`` (bench/results/probes.json), when present."""
    here = Path(__file__).resolve().parent
    out = ""
    analysis = here / "analysis.md"
    if analysis.exists():
        out += "\n" + analysis.read_text()
    probes = here / "results" / "probes.json"
    if probes.exists():
        doc = json.loads(probes.read_text())
        commit, clean = evidence_of({"environment": {"machine": doc.pop("machine", {})}})
        reason = _evidence.staleness(commit, clean, _evidence.BENCH_MEASURED)
        out += ("\n## Database floors (`python -m bench.probes`)\n\n"
                f"Measured on {_evidence.short(commit)}: {_evidence.status_cell(reason)}.\n\n```json\n"
                + json.dumps(doc, indent=2) + "\n```\n")
    return out


# -- the README's performance table ------------------------------------------------------

README_BEGIN = "<!-- performance table: generated by `make bench` (bench/_report.py) -->"
README_END = "<!-- end of the generated performance table -->"
BACKENDS = (("sqlite", "SQLite"), ("postgres", "PostgreSQL"))
_NO_TARGET = {"worker CPU per job, burn-down", "database round trips per job, burn-down"}


def _sig3(value: float) -> str:
    return f"{float(f'{value:.3g}'):,.0f}" if value >= 100 else f"{value:.3g}"


def _best_burndown(docs: dict[tuple[str, str], dict[str, Any]], backend: str) -> str | None:
    """The async burn-down case with the highest throughput (the "best concurrency")."""
    cases = [(d["median"].get("jobs_per_s", 0), c) for (c, b), d in docs.items()
             if b == backend and c.startswith("w3_burndown_c")]
    return max(cases)[1] if cases else None


def _readme_rows(docs: dict[tuple[str, str], dict[str, Any]]) -> list[tuple[str, str, Any]]:
    """(label, case prefix or "best burndown", cell(median, case)) per row."""
    return [
        ("bulk enqueue, batches of 1,000 (jobs/s)", "w1_bulk_b1000",
         lambda m, c: _sig3(m["jobs_per_s"])),
        ("single `task.enqueue()`, 1 thread (jobs/s)", "w2_single_t1",
         lambda m, c: _sig3(m["jobs_per_s"])),
        ("burn-down of 100,000 pre-inserted jobs, best concurrency (jobs/s)", "best",
         lambda m, c: f"{_sig3(m['jobs_per_s'])} ({c.rsplit('_', 1)[-1]})"),
        ("steady state, 5 min, enqueued while processed (jobs/s)", "w4_steady",
         lambda m, c: f"{_sig3(m['jobs_per_s'])}, last/first third "
                      f"{m.get('last_vs_first_third', 0):.2f}"),
        ("enqueue-to-start p50 / p99, in process (ms)", "w5_latency_in_process",
         lambda m, c: f"{m['p50_ms']:.1f} / {m['p99_ms']:.1f}"),
        ("enqueue-to-start p50 / p99, other process (ms)", "w5_latency_cross_process",
         lambda m, c: f"{m['p50_ms']:.1f} / {m['p99_ms']:.1f}"),
        ("slowdown with a 1,000,000-row backlog", "w6_backlog_c100",
         lambda m, c: f"{m['slowdown_pct']:.1f}%"),
        ("worker peak RSS", "w8_memory", lambda m, c: f"{m['peak_rss_mb']:.0f} MB"),
        ("worker CPU per job, burn-down", "best",
         lambda m, c: f"{m['cpu_us_per_job']:.0f} µs"),
        ("database round trips per job, burn-down", "best",
         lambda m, c: _fmt(m["round_trips_per_job"])),
    ]


def _target_cell(case: str, cells: dict[str, tuple[str, dict[str, Any]]]) -> str:
    out = []
    for backend, name in BACKENDS:
        checks = next((t for (prefix, b), t in TARGETS.items()
                       if b == backend and case.startswith(prefix)), [])
        marks = []
        for metric, kind, bound, label in checks:
            value = cells.get(backend, ("", {}))[1].get(metric)
            if value is None or metric == "last_vs_first_third":
                continue
            ok = value >= bound if kind == "min" else value <= bound
            short_by = (1 - value / bound) if kind == "min" else (value / bound - 1)
            marks.append(f"{label}: " + ("met" if ok else f"missed by {100 * short_by:.0f}%"
                                         if short_by < 0.1 else "missed"))
        if marks:
            out.append(f"{name} {', '.join(marks)}")
    return "; ".join(out)


def readme_table(docs: dict[tuple[str, str], dict[str, Any]]) -> str:
    """The README's performance table: the headline figures of ``summary.md``, each row
    with the commits it was measured on and its staleness, counted above the table."""
    rows, stale_rows = [], 0
    for label, case, cell in _readme_rows(docs):
        cells: dict[str, tuple[str, dict[str, Any]]] = {}
        commits, reasons = [], []
        for backend, _ in BACKENDS:
            name = _best_burndown(docs, backend) if case == "best" else case
            doc = docs.get((name, backend)) if name else None
            if doc is None:
                continue
            cells[backend] = (name or "", doc["median"])
            commit, _clean = evidence_of(doc)
            commits.append(_evidence.short(commit))
            reason = staleness(doc)
            if reason is not None:
                reasons.append(reason)
        values = [cell(cells[b][1], cells[b][0]) if b in cells else "-" for b, _ in BACKENDS]
        target = ("" if label in _NO_TARGET else
                  _target_cell(next(iter(cells.values()))[0] if cells else case, cells))
        status = _evidence.status_cell("; ".join(sorted(set(reasons))) if reasons else None)
        stale_rows += bool(reasons)
        rows.append(f"| {label} | {' | '.join(values)} | {target} | "
                    f"{' / '.join(dict.fromkeys(commits)) or 'unknown'} | {status} |")
    lines = [README_BEGIN,
             _evidence.header(stale_rows, len(rows), "make bench"), "",
             "| | SQLite | PostgreSQL | target | commit | status |",
             "|---|---:|---:|---|---|---|", *rows, README_END]
    return "\n".join(lines)


def update_readme(readme: Path, docs: dict[tuple[str, str], dict[str, Any]]) -> bool:
    """Replace the generated table between the markers; False when they are missing."""
    text = readme.read_text()
    begin, end = text.find(README_BEGIN), text.find(README_END)
    if begin < 0 or end < begin:
        return False
    readme.write_text(text[:begin] + readme_table(docs) + text[end + len(README_END):])
    return True
