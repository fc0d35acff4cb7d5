-- Conveyor schema version 3 (SQLite): metric rollups for dashboards and /metrics.
-- Workers add what they measured; several processes add to the same rows.
-- Buckets are REAL unix seconds at the start of a minute.

CREATE TABLE IF NOT EXISTS conveyor_metrics (
    bucket REAL NOT NULL,
    queue  TEXT NOT NULL,
    task   TEXT NOT NULL,
    metric TEXT NOT NULL,
    value  REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (bucket, queue, task, metric)
);

CREATE TABLE IF NOT EXISTS conveyor_metrics_totals (
    queue      TEXT NOT NULL,
    task       TEXT NOT NULL,
    metric     TEXT NOT NULL,
    value      REAL NOT NULL DEFAULT 0,
    updated_at REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    PRIMARY KEY (queue, task, metric)
);

CREATE TABLE IF NOT EXISTS conveyor_metrics_depth (
    bucket REAL    NOT NULL,
    queue  TEXT    NOT NULL,
    state  TEXT    NOT NULL,
    n      INTEGER NOT NULL,
    PRIMARY KEY (bucket, queue, state)
);
