-- Conveyor schema version 1 (SQLite): jobs and worker nodes.
-- Timestamps are REAL unix seconds from the database clock (julianday('now')).
CREATE TABLE IF NOT EXISTS conveyor_jobs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    task             TEXT    NOT NULL CHECK (length(task) BETWEEN 1 AND 200),
    queue            TEXT    NOT NULL CHECK (length(queue) BETWEEN 1 AND 100),
    args             TEXT    NOT NULL DEFAULT '[]',
    kwargs           TEXT    NOT NULL DEFAULT '{}',
    priority         INTEGER NOT NULL DEFAULT 0,
    state            TEXT    NOT NULL DEFAULT 'available' CHECK (state IN
                         ('scheduled', 'available', 'running', 'completed',
                          'retryable', 'cancelled', 'discarded')),
    attempt          INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts     INTEGER NOT NULL DEFAULT 20 CHECK (max_attempts > 0),
    scheduled_at     REAL    NOT NULL,
    created_at       REAL    NOT NULL,
    attempted_at     REAL,
    finished_at      REAL,
    errors           TEXT    NOT NULL DEFAULT '[]',
    result           TEXT,
    tags             TEXT    NOT NULL DEFAULT '[]',
    meta             TEXT    NOT NULL DEFAULT '{}',
    lease_owner      TEXT,
    lease_token      INTEGER,
    lease_expires_at REAL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    CHECK ((state = 'running') = (lease_token IS NOT NULL))
);

CREATE INDEX IF NOT EXISTS conveyor_jobs_fetch_idx
    ON conveyor_jobs (queue, priority DESC, scheduled_at, id) WHERE state = 'available';
CREATE INDEX IF NOT EXISTS conveyor_jobs_stage_idx
    ON conveyor_jobs (scheduled_at) WHERE state IN ('scheduled', 'retryable');
CREATE INDEX IF NOT EXISTS conveyor_jobs_lease_idx
    ON conveyor_jobs (lease_expires_at) WHERE state = 'running';
CREATE INDEX IF NOT EXISTS conveyor_jobs_state_idx ON conveyor_jobs (state, queue, id);
CREATE INDEX IF NOT EXISTS conveyor_jobs_task_idx ON conveyor_jobs (task, id);

CREATE TABLE IF NOT EXISTS conveyor_nodes (
    id           TEXT    PRIMARY KEY,
    hostname     TEXT    NOT NULL,
    pid          INTEGER NOT NULL,
    queues       TEXT    NOT NULL DEFAULT '{}',
    started_at   REAL    NOT NULL,
    heartbeat_at REAL    NOT NULL
);
