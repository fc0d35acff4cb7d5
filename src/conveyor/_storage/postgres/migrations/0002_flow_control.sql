-- Conveyor schema version 2 (PostgreSQL): queues, leadership, schedules, unique jobs,
-- rate limits and concurrency limits.

-- Live queue settings. A queue without a row runs with each worker's own settings.
CREATE TABLE IF NOT EXISTS conveyor_queues (
    name        text        PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 100),
    paused      boolean     NOT NULL DEFAULT false,
    -- NULL: each worker's own -q/-c; otherwise a limit, shared by the nodes (split)
    -- or applied on every node (per_node).
    concurrency integer     CHECK (concurrency IS NULL OR concurrency > 0),
    scope       text        NOT NULL DEFAULT 'split' CHECK (scope IN ('split', 'per_node')),
    rate_limit  text,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- One row per elected role; the term grows with every change of holder.
CREATE TABLE IF NOT EXISTS conveyor_leader (
    name       text        PRIMARY KEY,
    node_id    text        NOT NULL,
    term       bigint      NOT NULL CHECK (term > 0),
    elected_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);

CREATE TABLE IF NOT EXISTS conveyor_schedules (
    name         text        PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 200),
    task         text        NOT NULL,
    cron         text        NOT NULL,
    timezone     text        NOT NULL DEFAULT 'UTC',
    args         jsonb       NOT NULL DEFAULT '[]',
    kwargs       jsonb       NOT NULL DEFAULT '{}',
    queue        text,
    priority     smallint,
    misfire      text        NOT NULL DEFAULT 'run_once' CHECK (misfire IN ('skip', 'run_once', 'backfill')),
    backfill     integer     NOT NULL DEFAULT 0 CHECK (backfill >= 0),
    paused       boolean     NOT NULL DEFAULT false,
    last_tick    timestamptz,
    last_job_id  bigint,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- GCRA state: the theoretical arrival time of the next permitted start, per key.
CREATE TABLE IF NOT EXISTS conveyor_rate_limits (
    key text        PRIMARY KEY,
    tat timestamptz NOT NULL
);

ALTER TABLE conveyor_jobs ADD COLUMN IF NOT EXISTS unique_key text;
-- Comma-wrapped list of the states in which the key is held, e.g. ',available,running,'.
ALTER TABLE conveyor_jobs ADD COLUMN IF NOT EXISTS unique_states text;
ALTER TABLE conveyor_jobs ADD COLUMN IF NOT EXISTS concurrency_key text;
ALTER TABLE conveyor_jobs ADD COLUMN IF NOT EXISTS holds_slot boolean NOT NULL DEFAULT false;

-- Two live jobs can never share a unique key: the database, not a process, decides.
CREATE UNIQUE INDEX IF NOT EXISTS conveyor_jobs_unique_idx ON conveyor_jobs (unique_key)
    WHERE unique_key IS NOT NULL AND strpos(unique_states, ',' || state || ',') > 0;
CREATE INDEX IF NOT EXISTS conveyor_jobs_concurrency_idx ON conveyor_jobs (concurrency_key)
    WHERE state = 'running' AND holds_slot;

-- What each node can run, so "why is my job not running?" can say no worker knows a task.
ALTER TABLE conveyor_nodes ADD COLUMN IF NOT EXISTS tasks jsonb NOT NULL DEFAULT '[]';

-- The pruner deletes finished jobs by age in bounded batches.
CREATE INDEX IF NOT EXISTS conveyor_jobs_finished_idx ON conveyor_jobs (state, finished_at)
    WHERE finished_at IS NOT NULL;
