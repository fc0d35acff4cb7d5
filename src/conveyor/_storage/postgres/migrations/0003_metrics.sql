-- Conveyor schema version 3 (PostgreSQL): metric rollups for dashboards and /metrics.
-- Workers add what they measured; several nodes add to the same rows.

-- Per-minute rollups by queue, task and metric (outcome counts, run time and queue
-- latency sums and histogram buckets). Pruned after the retention period.
CREATE TABLE IF NOT EXISTS conveyor_metrics (
    bucket timestamptz      NOT NULL,
    queue  text             NOT NULL,
    task   text             NOT NULL,
    metric text             NOT NULL,
    value  double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (bucket, queue, task, metric)
);

-- Running totals since the schema was created: the counters of /metrics never go down.
CREATE TABLE IF NOT EXISTS conveyor_metrics_totals (
    queue      text             NOT NULL,
    task       text             NOT NULL,
    metric     text             NOT NULL,
    value      double precision NOT NULL DEFAULT 0,
    updated_at timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, task, metric)
);

-- Jobs waiting or running per queue and state, sampled once a minute; queue '*' is
-- the sum over all queues (present even when every queue is empty).
CREATE TABLE IF NOT EXISTS conveyor_metrics_depth (
    bucket timestamptz NOT NULL,
    queue  text        NOT NULL,
    state  text        NOT NULL,
    n      bigint      NOT NULL,
    PRIMARY KEY (bucket, queue, state)
);
