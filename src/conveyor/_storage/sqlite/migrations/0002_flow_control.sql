-- Conveyor schema version 2 (SQLite): queues, leadership, schedules, unique jobs,
-- rate limits and concurrency limits.

CREATE TABLE IF NOT EXISTS conveyor_queues (
    name        TEXT    PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 100),
    paused      INTEGER NOT NULL DEFAULT 0,
    concurrency INTEGER CHECK (concurrency IS NULL OR concurrency > 0),
    scope       TEXT    NOT NULL DEFAULT 'split' CHECK (scope IN ('split', 'per_node')),
    rate_limit  TEXT,
    updated_at  REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0)
);

CREATE TABLE IF NOT EXISTS conveyor_leader (
    name       TEXT    PRIMARY KEY,
    node_id    TEXT    NOT NULL,
    term       INTEGER NOT NULL CHECK (term > 0),
    elected_at REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    expires_at REAL    NOT NULL
);

CREATE TABLE IF NOT EXISTS conveyor_schedules (
    name         TEXT    PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 200),
    task         TEXT    NOT NULL,
    cron         TEXT    NOT NULL,
    timezone     TEXT    NOT NULL DEFAULT 'UTC',
    args         TEXT    NOT NULL DEFAULT '[]',
    kwargs       TEXT    NOT NULL DEFAULT '{}',
    queue        TEXT,
    priority     INTEGER,
    misfire      TEXT    NOT NULL DEFAULT 'run_once' CHECK (misfire IN ('skip', 'run_once', 'backfill')),
    backfill     INTEGER NOT NULL DEFAULT 0 CHECK (backfill >= 0),
    paused       INTEGER NOT NULL DEFAULT 0,
    last_tick    REAL,
    last_job_id  INTEGER,
    created_at   REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    updated_at   REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0)
);

CREATE TABLE IF NOT EXISTS conveyor_rate_limits (
    key TEXT PRIMARY KEY,
    tat REAL NOT NULL
);

ALTER TABLE conveyor_jobs ADD COLUMN unique_key TEXT;
ALTER TABLE conveyor_jobs ADD COLUMN unique_states TEXT;
ALTER TABLE conveyor_jobs ADD COLUMN concurrency_key TEXT;
ALTER TABLE conveyor_jobs ADD COLUMN holds_slot INTEGER NOT NULL DEFAULT 0;

CREATE UNIQUE INDEX IF NOT EXISTS conveyor_jobs_unique_idx ON conveyor_jobs (unique_key)
    WHERE unique_key IS NOT NULL AND instr(unique_states, ',' || state || ',') > 0;
CREATE INDEX IF NOT EXISTS conveyor_jobs_concurrency_idx ON conveyor_jobs (concurrency_key)
    WHERE state = 'running' AND holds_slot = 1;

-- What each node can run, so "why is my job not running?" can say no worker knows a task.
ALTER TABLE conveyor_nodes ADD COLUMN tasks TEXT NOT NULL DEFAULT '[]';

-- The pruner deletes finished jobs by age in bounded batches.
CREATE INDEX IF NOT EXISTS conveyor_jobs_finished_idx ON conveyor_jobs (state, finished_at)
    WHERE finished_at IS NOT NULL;
