-- Conveyor schema version 1 (PostgreSQL): jobs and worker nodes.
CREATE TABLE IF NOT EXISTS conveyor_jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task             text        NOT NULL CHECK (length(task) BETWEEN 1 AND 200),
    queue            text        NOT NULL CHECK (length(queue) BETWEEN 1 AND 100),
    args             jsonb       NOT NULL DEFAULT '[]',
    kwargs           jsonb       NOT NULL DEFAULT '{}',
    priority         smallint    NOT NULL DEFAULT 0,
    state            text        NOT NULL DEFAULT 'available' CHECK (state IN
                         ('scheduled', 'available', 'running', 'completed',
                          'retryable', 'cancelled', 'discarded')),
    attempt          integer     NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts     integer     NOT NULL DEFAULT 20 CHECK (max_attempts > 0),
    scheduled_at     timestamptz NOT NULL DEFAULT now(),
    created_at       timestamptz NOT NULL DEFAULT now(),
    attempted_at     timestamptz,
    finished_at      timestamptz,
    errors           jsonb       NOT NULL DEFAULT '[]',
    result           jsonb,
    tags             jsonb       NOT NULL DEFAULT '[]',
    meta             jsonb       NOT NULL DEFAULT '{}',
    lease_owner      text,
    lease_token      bigint,
    lease_expires_at timestamptz,
    cancel_requested boolean     NOT NULL DEFAULT false,
    CHECK ((state = 'running') = (lease_token IS NOT NULL))
);

-- The claim reads only available rows, in claim order: backlogs of other states cost nothing.
CREATE INDEX IF NOT EXISTS conveyor_jobs_fetch_idx
    ON conveyor_jobs (queue, priority DESC, scheduled_at, id) WHERE state = 'available';
CREATE INDEX IF NOT EXISTS conveyor_jobs_stage_idx
    ON conveyor_jobs (scheduled_at) WHERE state IN ('scheduled', 'retryable');
CREATE INDEX IF NOT EXISTS conveyor_jobs_lease_idx
    ON conveyor_jobs (lease_expires_at) WHERE state = 'running';
CREATE INDEX IF NOT EXISTS conveyor_jobs_state_idx ON conveyor_jobs (state, queue, id);
CREATE INDEX IF NOT EXISTS conveyor_jobs_task_idx ON conveyor_jobs (task, id);

-- A queue table is update-heavy: vacuum it early and without throttling.
ALTER TABLE conveyor_jobs SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0.02,
    fillfactor = 90
);

CREATE TABLE IF NOT EXISTS conveyor_nodes (
    id           text        PRIMARY KEY,
    hostname     text        NOT NULL,
    pid          integer     NOT NULL,
    queues       jsonb       NOT NULL DEFAULT '{}',
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);
