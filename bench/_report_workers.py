"""The many-workers table of ``summary.md`` (workload 9): how throughput, empty claims,
connections and wake-ups change from 1 to 8 worker processes on one PostgreSQL."""

from __future__ import annotations

from typing import Any

COLUMNS = (("processes", "processes"), ("jobs_per_s", "jobs/s"),
           ("scaling", "vs 1 process"), ("empty_claims_per_job", "empty claims / job"),
           ("claims_per_job", "claims / job"),
           ("connections_peak_total", "connections (peak, all)"),
           ("connections_peak_per_process", "connections (peak, per process)"),
           ("wakes_per_job_per_process", "wake-ups / job / process"),
           ("wakes_per_batch_per_process", "wake-ups / batch / process"),
           ("db_backend_cpu_us_per_job", "db backend CPU µs / job"),
           ("worker_cpu_us_per_job", "worker CPU µs / job"))


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def workers_table(docs: dict[tuple[str, str], dict[str, Any]]) -> str:
    """Markdown for the w9 cases (burn-down rows, then steady rows); "" when none ran."""
    rows = sorted(((c, d) for (c, b), d in docs.items() if c.startswith("w9_")),
                  key=lambda cd: ("steady" in cd[0], cd[1]["median"].get("processes", 0)))
    if not rows:
        return ""
    base = {("steady" in c): d["median"].get("jobs_per_s") for c, d in rows
            if d["median"].get("processes") == 1}
    lines = ["", "## Many workers (workload 9, PostgreSQL, concurrency 50 per process)", "",
             "Burn-down: 100,000 pre-inserted jobs drained by N `conveyor worker --burst` "
             "processes. Steady: batches of 100 enqueued at a fixed rate while N workers wait, "
             "so each batch is one NOTIFY that reaches every process (the herd check; its "
             "jobs/s is the rate the suite managed to enqueue). "
             "Connections are sampled from `pg_stat_activity` every 50 ms by "
             "`application_name`; database CPU is that of the workers' backends, from `/proc`.",
             "", "| case | " + " | ".join(label for _, label in COLUMNS) + " |",
             "|---|" + "---:|" * len(COLUMNS)]
    for case, doc in rows:
        med = dict(doc["median"])
        one = base.get("steady" in case)
        if one and med.get("jobs_per_s") and "steady" not in case:
            med["scaling"] = f"{med['jobs_per_s'] / one:.2f}x"
        lines.append(f"| {case} | " + " | ".join(_cell(med.get(k)) for k, _ in COLUMNS) + " |")
    return "\n".join(lines) + "\n"
