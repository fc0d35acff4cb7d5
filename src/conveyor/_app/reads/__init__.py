"""The operator reads, written once: what ``conveyor status``, the dashboard's pages
and the Prometheus collector show, each read through ``Operations`` (the app's public
methods and its storage) and returned as plain dataclasses. The interfaces only render
them: rich tables, HTML, prometheus-client families or the text exposition format.

- ``overview``: jobs per state, the last hour, queues, workers, health, schedules and
  failure groups;
- ``jobs``: a filtered page of jobs and one job's detail;
- ``composition``: a workflow's and a batch's members, with what each may do;
- ``series``: per-minute throughput, failures, latency and depth of the last hour;
- ``metrics``: the Prometheus metric families as plain data.
"""

from .jobs import (
    TEXT_SCAN,
    AttemptRun,
    BulkPreview,
    JobDetail,
    JobRow,
    JobsPage,
    TimelineEntry,
    arguments_preview,
    attempt_runs,
    bounded,
    bulk_preview,
    first_line,
    job_detail,
    jobs_page,
    last_error,
    preview,
    timeline,
)
from .metrics import MetricFamily, MetricSample, Snapshot, bucket_label, families, read
from .overview import (
    FINAL_CAP,
    NO_METRICS,
    NodeView,
    Overview,
    QueueView,
    failure_groups,
    health,
    overview,
    queues,
    schedules,
    series,
    state_counts,
    totals,
    workers,
)
from .series import (
    DEFAULT_RANGE,
    RANGES,
    Range,
    Series,
    build_series,
    hour_window,
    per_queue,
    quantile,
    window,
)

__all__ = [
    "DEFAULT_RANGE", "FINAL_CAP", "NO_METRICS", "RANGES", "TEXT_SCAN", "AttemptRun",
    "BulkPreview", "JobDetail", "JobRow", "JobsPage", "MetricFamily", "MetricSample",
    "NodeView", "Overview", "QueueView", "Range", "Series", "Snapshot", "TimelineEntry",
    "arguments_preview", "attempt_runs", "bounded", "bucket_label", "build_series",
    "bulk_preview", "failure_groups", "families", "first_line", "health", "hour_window",
    "job_detail", "jobs_page", "last_error", "overview", "per_queue", "preview", "quantile",
    "queues", "read", "schedules", "series", "state_counts", "timeline", "totals", "window",
    "workers",
]
