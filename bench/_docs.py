"""The figures the documentation quotes, rendered from the result files.

A document quotes a measured figure only inside a block between ``<!-- figures: ID ... -->``
and ``<!-- end of figures: ID -->``; the block's text is what :data:`RENDERERS` ``[ID]``
makes of ``bench/results/`` (each figure, the commit it was measured on and whether that
is still HEAD's code). ``python -m bench --summary-only`` rewrites every block;
``tests/test_evidence.py`` re-renders them and fails on any difference (a figure edited
by hand) and on a measured figure outside a block (a figure no result file holds).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests import _evidence

from ._report import _sig3, evidence_of, load
from ._report_workers import workers_table

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
#: The documents whose measured figures are rendered here.
DOCS = ("README.md", "docs/scaling.md", "docs/workflows.md", "docs/arguments.md",
        "docs/flow-control.md")
BLOCK = re.compile(r"(?P<head><!-- figures: (?P<id>[\w-]+)[^\n]*-->)\n(?P<body>.*?)\n?"
                   r"(?P<tail><!-- end of figures: (?P=id) -->)", re.DOTALL)

Docs = dict[tuple[str, str], dict[str, Any]]


def _json(name: str, results: Path) -> dict[str, Any]:
    return dict(json.loads((results / name).read_text(encoding="utf-8")))


def _stamp(*machines: dict[str, Any],
           measured: tuple[str, ...] = _evidence.BENCH_MEASURED) -> str:
    """"measured on `abc1234`: current" (or **stale**: why) for the machines' git stamps."""
    commits, reasons = [], []
    for machine in machines:
        commit, clean = evidence_of({"environment": {"machine": machine}})
        commits.append(_evidence.short(commit))
        reason = _evidence.staleness(commit, clean, measured)
        if reason:
            reasons.append(reason)
    status = _evidence.status_cell("; ".join(sorted(set(reasons))) if reasons else None)
    return f"measured on {' / '.join(dict.fromkeys(commits))}: {status}"


def _n(value: float) -> str:
    return f"{value:,.0f}"


def _best(docs: Docs, backend: str, prefix: str) -> tuple[str, dict[str, Any]]:
    case = max((d["median"].get("jobs_per_s", 0), c) for (c, b), d in docs.items()
               if b == backend and c.startswith(prefix))[1]
    return case, docs[(case, backend)]


# -- README -----------------------------------------------------------------------------------


def readme_machine(results: Path) -> str:
    docs = load(results)
    machine = next(iter(docs.values()))["environment"]["machine"]
    pg = next(d for (c, b), d in docs.items() if b == "postgres")["environment"]["database"]
    return (f"On a {machine['cores']}-core VM ({machine['cpu']}, Python {machine['python']}, "
            f"SQLite {machine['sqlite']}, PostgreSQL {pg['server_version'].split()[0]}), "
            "no-op jobs, medians of 3 runs; the worker, the client and the database share "
            "the cores.")


def readme_end_to_end(results: Path) -> str:
    docs = load(results)
    parts = []
    for backend, name in (("postgres", "PostgreSQL"), ("sqlite", "SQLite")):
        steady, single = docs[("w4_steady", backend)], docs[("w2_single_t1", backend)]
        bulk = docs[("w1_bulk_b10000", backend)]
        case, burn = _best(docs, backend, "w3_burndown_c")
        stamp = _stamp(*(d["environment"]["machine"] for d in (steady, single, bulk, burn)))
        parts.append(
            f"on {name}, {_sig3(steady['median']['jobs_per_s'])} jobs/s end to end (the steady "
            f"state), {_sig3(single['median']['jobs_per_s'])} single `task.enqueue()` calls/s, "
            f"{_sig3(bulk['median']['jobs_per_s'])} jobs/s bulk-enqueued in batches of 10,000 "
            f"and {_sig3(burn['median']['jobs_per_s'])} jobs/s burned down "
            f"({case.rsplit('_', 1)[-1]}; {stamp})")
    return "Conveyor's figures to compare with other queues: " + "; ".join(parts) + "."


def readme_peers(results: Path) -> str:
    """``make bench-peers``' section: Conveyor beside the other queues, one run."""
    from .peers._render import readme_section

    if not (results / "peers.json").exists():
        return "No `make bench-peers` result is kept yet (`bench/results/peers.json`)."
    result = _json("peers.json", results)
    git = result.get("machine", {}).get("git", {})
    reason = _evidence.staleness(git.get("commit"), git.get("clean"), _evidence.PEERS_MEASURED)
    return (readme_section(result) + "\n\nThese figures: measured on "
            f"{_evidence.short(git.get('commit'))}: {_evidence.status_cell(reason)} "
            f"(measured code: {_evidence.describe(_evidence.PEERS_MEASURED)}).")


def _without_last_columns(line: str, n: int) -> str:
    """A markdown table line less its last ``n`` cells (other lines as they are)."""
    if not line.startswith("|"):
        return line
    cells = line.strip().strip("|").split("|")
    return "|" + "|".join(cells[:-n]) + "|"


def readme_quick(results: Path) -> str:
    """``make bench-quick``'s tables: both backends, the floors and pgqueuer, one run."""
    if not (results / "quick.json").exists():
        return "No `make bench-quick` result is kept yet (`bench/results/quick.json`)."
    quick = _json("quick.json", results)
    git, m = quick["machine"].get("git", {}), quick["machine"]
    reason = _evidence.staleness(git.get("commit"), git.get("clean"), _evidence.QUICK_MEASURED)
    tables = quick["tables"]
    # make bench's own table markers and its stale-rows header stay unique in the README
    # (its writer and tests/test_evidence.py find them); the stamp above says it instead
    # and its commit and status columns go too (one stamp for the whole run)
    main_table = "\n".join(_without_last_columns(ln, 2) for ln in tables["readme"].splitlines()
                            if not ln.startswith("<!--") and "rows** measured" not in ln
                            ).strip("\n")
    parts = [f"Measured {quick['date']} by `make bench-quick` ({quick['took_s']} s in all; "
             f"{m.get('cores')}-core {m.get('cpu')}, Python {m.get('python')}, SQLite "
             f"{m.get('sqlite')}; load average {m.get('loadavg_1m')} at the start), medians "
             f"of {quick['repeat']}, on {_evidence.short(git.get('commit'))}: "
             f"{_evidence.status_cell(reason)} (measured code: "
             f"{_evidence.describe(_evidence.QUICK_MEASURED)}).", "", main_table, "",
             tables["floors"]]
    if "peers" in tables:
        parts += ["", "pgqueuer in the same run (bench.peers' runners, bench-quick's sizes):",
                  "", tables["peers"], "", tables["ratios"]]
    return "\n".join(parts)


# -- docs/scaling.md --------------------------------------------------------------------------


def scaling_stamp(results: Path) -> str:
    cap = _json("capacity.json", results)
    w9 = [d for (c, _), d in load(results).items() if c.startswith("w9_")]
    return (f"**Capacity figures** (`bench/results/capacity.json`, `probes.json`): "
            f"{_stamp(cap['machine'], _json('probes.json', results)['machine'])}. "
            f"**Many-workers figures** (`bench/results/postgres_w9_*.json`): "
            f"{_stamp(*(d['environment']['machine'] for d in w9))}.")


def scaling_db_cpu(results: Path) -> str:
    life = _json("capacity.json", results)["lifecycle"]
    cpu = life["load_sensitive"]["db_backend_cpu_us_per_job"]
    total = math.fsum(cpu.values())  # the same on every Python (see model.py)
    rows = [f"| {phase} | {us:.1f} µs |" for phase, us in cpu.items()]
    return "\n".join(["| phase | server CPU per job |", "|---|---:|", *rows,
                      f"| **a job's whole life** | **{total:.1f} µs, about "
                      f"{_n(life['load_sensitive']['jobs_per_s_per_db_core'])} jobs/s per "
                      "PostgreSQL core** |",
                      "", f"({_n(life['jobs'])} jobs at concurrency {life['concurrency']}.)"])


def scaling_probes(results: Path) -> str:
    pg = _json("probes.json", results)["postgres"]
    floor = pg["claim_ack_floor"]
    return (f"`EXPLAIN ANALYZE` of the statements alone: {pg['insert_1000']['us_per_row']} µs "
            f"per row for an insert of 1,000, {pg['claim_100']['us_per_row']} µs for a claim "
            f"of 100 and {pg['ack_100']['us_per_row']} µs for an ack of 100. With Conveyor's "
            "own statements in a raw psycopg loop (`bench/floor.py`), claim + ack cost "
            f"{floor['overlapped_b100']['db_backend_cpu_us_per_job']} µs of server CPU per "
            f"job in overlapped batches of 100 "
            f"({floor['overlapped_b1000']['db_backend_cpu_us_per_job']} µs in batches of "
            f"1,000; {floor['overlapped_b1000_all_columns']['db_backend_cpu_us_per_job']} µs "
            "when the claim returns every column).")


def scaling_sizes(results: Path) -> str:
    sizes = _json("capacity.json", results)["bytes_per_million_jobs"]
    lines = ["| state mix | heap MB | TOAST MB | indexes MB | total MB | largest indexes (MB) |",
             "|---|---:|---:|---:|---:|---|"]
    mb = 1e6
    for mix, s in sizes.items():
        if not isinstance(s, dict) or "heap_bytes" not in s:
            continue
        largest = sorted(((b, n) for n, b in s["index_bytes"].items() if b > 1_000_000),
                         reverse=True)[:4]
        names = ", ".join(f"{n.removeprefix('conveyor_jobs_')} {b / mb:.0f}" for b, n in largest)
        lines.append(f"| {mix} | {s['heap_bytes'] / mb:,.0f} | {s['toast_bytes'] / mb:,.0f} | "
                     f"{s['indexes_total_bytes'] / mb:,.0f} | {s['total_bytes'] / mb:,.0f} | "
                     f"{names} |")
    return "\n".join(lines)


def scaling_wal(results: Path) -> str:
    wal = _json("capacity.json", results)["lifecycle"]["wal_per_job"]
    lines = ["| phase | WAL bytes per job | records per job | record bytes | "
             "full-page image bytes |", "|---|---:|---:|---:|---:|"]
    for phase, w in wal.items():
        lines.append(f"| {phase} | {w['bytes']:,.0f} | {w['records']:.2f} | "
                     f"{w['record_bytes']:,.0f} | {w['full_page_image_bytes']:,.0f} |")
    total = {k: math.fsum(w[k] for w in wal.values())
             for k in ("bytes", "records", "record_bytes", "full_page_image_bytes")}
    lines.append(f"| **a job's life** | **{total['bytes']:,.0f}** | {total['records']:.1f} | "
                 f"{total['record_bytes']:,.0f} | {total['full_page_image_bytes']:,.0f} |")
    return "\n".join(lines)


def scaling_workers(results: Path) -> str:
    table = workers_table(load(results)).strip().splitlines()
    return "\n".join(line for line in table if line.startswith("|"))


def scaling_model(results: Path) -> str:
    from . import model  # only this block needs the capacity model

    costs = model.Costs.load(results)
    rows = [model.scenario(costs, rate, 24 * 3600.0) for rate in (1_000.0, 10_000.0, 100_000.0)]
    table = model.markdown(costs, rows, 24.0).split("\n\nInputs:")[0]
    inputs = ", ".join(f"{k}={v:,.1f}" if isinstance(v, float) else f"{k}={v}"
                       for k, v in dataclasses.asdict(costs).items())
    return ("Its defaults: a mean handler time of 10 ms at concurrency 50 per process, a "
            "margin of 2 on worker processes, 24 hours of retention (the default "
            f"`completed_retention`).\n\n{table}\n\nInputs: {inputs}.")


# -- docs/workflows.md ------------------------------------------------------------------------


def workflows_completion_cost(results: Path) -> str:
    parts, machines = [], []
    for backend, name in (("postgres", "PostgreSQL"), ("sqlite", "SQLite")):
        doc = load(results)[("w10_workflow_completion_cost", backend)]
        m = doc["median"]
        machines.append(doc["environment"]["machine"])
        parts.append(
            f"on {name}, {m['cpu_us_per_job_independent']:.0f} µs of worker CPU per "
            f"independent job, {m['cpu_us_per_job_one_dependent']:.0f} µs when each "
            f"completion releases a dependent, {m['cpu_us_per_job_fan_in_small']:.0f} µs "
            f"in a fan-in of {m['small_fan_in']:.0f} and "
            f"{m['cpu_us_per_job_fan_in_large']:.0f} µs in a fan-in of {m['jobs']:,.0f} "
            f"(large vs small: {m['fan_in_large_vs_small']:.2f}x)")
    return ("Measured by `python -m bench --cases w10_workflow_completion_cost` "
            f"(`bench/results/*_w10_workflow_completion_cost.json`, {_stamp(*machines)}): "
            + "; ".join(parts) + ".")


def flow_chunks(results: Path) -> str:
    doc = _json("chunks.json", results)
    machine = doc["machine"]
    lines = ["| backend | handler | one by one | in chunks | chunks / one by one |",
             "|---|---|---:|---:|---:|"]
    what = {"noop": "does nothing", "call_2ms": "makes one 2 ms call"}
    for backend, name in (("postgres", "PostgreSQL"), ("sqlite", "SQLite")):
        for workload, r in doc["backends"].get(backend, {}).items():
            m = r["median_jobs_per_s"]
            lines.append(f"| {name} | {what.get(workload, workload)} | {_n(m['plain'])} jobs/s "
                         f"| {_n(m['chunked'])} jobs/s | {r['chunked_over_plain']:.2f}x |")
    chunk = doc["chunk"]
    return ("\n".join(lines) + "\n\n"
            f"{doc['jobs']:,} small jobs enqueued first, then run by one in-process worker "
            f"at concurrency {doc['concurrency']}, one by one or in chunks "
            f"(`Chunk(size={chunk['size']}, wait={chunk['wait']:g})`); medians of "
            f"{doc['rounds']} rounds (`python -m bench.chunks`, `bench/results/chunks.json`, "
            f"{_stamp(machine, measured=_evidence.CHUNKS_MEASURED)}). "
            f"A {machine['cores']}-core machine shared with other work "
            f"(load average {machine['loadavg_1m']:g} at the start, "
            f"{doc['loadavg_1m_at_end']:g} at the end): the ranges are wide.")


def flow_fairness(results: Path) -> str:
    doc = _json("fairness.json", results)
    machine = doc["machine"]
    lines = ["| backend | big jobs started before the last small one | with fair keys "
             "| without | with / without |", "|---|---:|---:|---:|---:|"]
    for backend, name in (("postgres", "PostgreSQL"), ("sqlite", "SQLite")):
        r = doc["backends"].get(backend)
        if r is None:
            continue
        m = r["median_jobs_per_s"]
        worst = r["worst_big_before_last_small"]
        lines.append(f"| {name} | {'-' if worst is None else _n(worst)} | {_n(m['fair'])} jobs/s "
                     f"| {_n(m['plain'])} jobs/s | {r['fair_over_plain']:.2f}x |")
    return ("\n".join(lines) + "\n\n"
            f"{doc['big']:,} jobs of fair key `big` enqueued first, then {doc['small']:,} of "
            f"key `small`; one in-process worker at concurrency {doc['concurrency']} runs them "
            f"(no-op handlers). Throughput over the first {doc['measured_starts']:,} starts, "
            "against the same jobs enqueued without a key (plain claims: there, every small "
            "job waits behind every big one); "
            f"{'the median of ' + str(doc['rounds']) + ' rounds' if doc['rounds'] > 1 else 'one round'} "
            "(`python -m bench.fairness`, `bench/results/fairness.json`, "
            f"{_stamp(machine, measured=_evidence.FAIRNESS_MEASURED)}). "
            f"A {machine['cores']}-core machine shared with other work "
            f"(load average {machine['loadavg_1m']:g} at the start, "
            f"{doc['loadavg_1m_at_end']:g} at the end): the ratios are rough.")


#: bench/search.py's searches, as the table names them.
SEARCHES = (("recent_order_id", "a recent `order_id` (1 match)"),
            ("old_order_id_outside_the_bound",
             "an old `order_id`, first window only (none found there)"),
            ("nested_customer_id", "`customer.id` (1 job in 5,000)"),
            ("tag_1_percent", "a tag on 1% of the jobs"),
            ("tag_and_argument", "that tag and `customer.tier`"))


def dashboard_search(results: Path) -> str:
    doc = _json("search.json", results)
    machine = doc["machine"]
    names = [(b, n) for b, n in (("postgres", "PostgreSQL"), ("sqlite", "SQLite"))
             if b in doc["backends"]]
    lines = ["| search (`list_jobs(..., limit=50)`) | "
             + " | ".join(f"{n} median (worst)" for _, n in names) + " |",
             "|---|" + "---:|" * len(names)]
    for key, label in SEARCHES:
        cells = []
        for backend, _ in names:
            row = doc["backends"][backend]["searches"][key]
            cells.append(f"{row['median_ms']:,.0f} ms ({row['max_ms']:,.0f} ms)")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += _walk_rows(doc, names)
    loads = ", ".join(f"{n} {doc['backends'][b]['load_seconds']:g} s" for b, n in names)
    return ("\n".join(lines) + "\n\n"
            f"{doc['jobs']:,} finished jobs in history and {doc['hot']:,} waiting ones; each "
            f"request reads one window of {doc['scan_bound']:,} job ids at most (the first: "
            "the newest; the walk goes on with `before_id=page.next_before_id`); "
            f"{doc['rounds']} rounds each (loading history took {loads}; "
            "`python -m bench.search`, `bench/results/search.json`, "
            f"{_stamp(machine, measured=_evidence.SEARCH_MEASURED)}). "
            f"A {machine['cores']}-core machine shared with other work "
            f"(load average {machine['loadavg_1m']:g} at the start, "
            f"{doc['loadavg_1m_at_end']:g} at the end)." + _gin_text(doc))


def _gin_text(doc: dict[str, Any]) -> str:
    """The GIN side measurement (PostgreSQL), when the file has it."""
    gin = doc["backends"].get("postgres", {}).get("gin_on_history_kwargs")
    if gin is None:
        return ""
    return ("\n\nA GIN (`jsonb_path_ops`) index on history's kwargs, measured in the same "
            f"run: copying {gin['rows']:,} of these jobs into a table like history, "
            f"{gin['batch']:,} per `INSERT ... SELECT` as the archiver does, took "
            f"{gin['ratio_median']:.2f}x as long with the index ({gin['plain_median_s']:g} s "
            f"without, {gin['gin_median_s']:g} s with; {gin['ratio_min']:.2f}x to "
            f"{gin['ratio_max']:.2f}x over {gin['rounds']} alternating rounds), and the "
            f"index took {gin['index_mb']:g} MB beside the table's {gin['heap_mb']:g} MB.")


def _walk_rows(doc: dict[str, Any], names: list[tuple[str, str]]) -> list[str]:
    """The walk to the oldest order id, window after window: in all, and per request."""
    walks = [doc["backends"][b].get("oldest_order_id_window_by_window") for b, _ in names]
    if not all(walks):
        return []
    requests = " | ".join(f"{w['requests']} requests, {w['found']} found" for w in walks)
    return [f"| the oldest `order_id`, window by window: | {requests} |",
            "| &nbsp;&nbsp;all its requests | " + " | ".join(
                f"{w['total_median_ms']:,.0f} ms ({w['total_max_ms']:,.0f} ms)" for w in walks)
            + " |",
            "| &nbsp;&nbsp;each request | " + " | ".join(
                f"{w['request_median_ms']:,.0f} ms ({w['request_max_ms']:,.0f} ms)"
                for w in walks) + " |"]


RENDERERS: dict[str, Callable[[Path], str]] = {
    "readme-machine": readme_machine,
    "readme-end-to-end": readme_end_to_end,
    "readme-peers": readme_peers,
    "readme-quick": readme_quick,
    "scaling-stamp": scaling_stamp,
    "scaling-db-cpu": scaling_db_cpu,
    "scaling-probes": scaling_probes,
    "scaling-sizes": scaling_sizes,
    "scaling-wal": scaling_wal,
    "scaling-workers": scaling_workers,
    "scaling-model": scaling_model,
    "workflows-completion-cost": workflows_completion_cost,
    "flow-chunks": flow_chunks,
    "flow-fairness": flow_fairness,
    "dashboard-search": dashboard_search,
}


def render(text: str, results: Path = RESULTS) -> str:
    """``text`` with every block's body rendered anew (unknown ids raise KeyError)."""
    return BLOCK.sub(lambda m: f"{m['head']}\n{RENDERERS[m['id']](results)}\n{m['tail']}", text)


def outside_blocks(text: str) -> str:
    """``text`` without the blocks' bodies (what no renderer vouches for)."""
    return BLOCK.sub(lambda m: f"{m['head']}\n{m['tail']}", text)


def update(root: Path = ROOT, results: Path = RESULTS) -> list[str]:
    """Rewrite every block of :data:`DOCS`; the documents changed."""
    changed = []
    for name in DOCS:
        path = root / name
        text = path.read_text(encoding="utf-8")
        new = render(text, results)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(name)
    return changed
