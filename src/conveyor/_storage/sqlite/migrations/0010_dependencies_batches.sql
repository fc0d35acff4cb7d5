-- Conveyor schema version 10 (SQLite): job dependencies, workflows and batches.
-- A new state, 'pending' (waiting on dependencies or on a batch), changes the state
-- CHECK, which SQLite can only do by rebuilding the table: copy every row, keep the
-- AUTOINCREMENT high-water mark (ids are never reused), recreate the indexes and view.
CREATE TABLE conveyor_jobs_rebuilt (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    task             TEXT    NOT NULL CHECK (length(task) BETWEEN 1 AND 200),
    queue            TEXT    NOT NULL CHECK (length(queue) BETWEEN 1 AND 100),
    args             TEXT    NOT NULL DEFAULT '[]',
    kwargs           TEXT    NOT NULL DEFAULT '{}',
    priority         INTEGER NOT NULL DEFAULT 0,
    state            TEXT    NOT NULL DEFAULT 'available' CHECK (state IN
                         ('pending', 'scheduled', 'available', 'running', 'completed',
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
    unique_key       TEXT,
    unique_states    TEXT,
    concurrency_key  TEXT,
    holds_slot       INTEGER NOT NULL DEFAULT 0,
    ran_on           TEXT,
    run_time         REAL,
    -- the workflow this job belongs to, and the batch it counts in
    workflow_id      TEXT,
    batch_id         INTEGER,
    -- dependencies not final yet (a batch callback: 1 until its batch settles)
    deps_pending     INTEGER NOT NULL DEFAULT 0,
    -- 1 when a final state must settle something: dependents or a batch. The triggers
    -- below test it first, so that a job without followers costs nothing more.
    followers        INTEGER NOT NULL DEFAULT 0,
    -- the keyword argument that receives the dependencies' results on release (a chord)
    results_arg      TEXT,
    -- the batch this job is a callback of
    callback_batch_id INTEGER,
    CHECK ((state = 'running') = (lease_token IS NOT NULL))
);

INSERT INTO conveyor_jobs_rebuilt
    (id, task, queue, args, kwargs, priority, state, attempt, max_attempts, scheduled_at,
     created_at, attempted_at, finished_at, errors, result, tags, meta, lease_owner,
     lease_token, lease_expires_at, cancel_requested, unique_key, unique_states,
     concurrency_key, holds_slot, ran_on, run_time)
SELECT id, task, queue, args, kwargs, priority, state, attempt, max_attempts, scheduled_at,
       created_at, attempted_at, finished_at, errors, result, tags, meta, lease_owner,
       lease_token, lease_expires_at, cancel_requested, unique_key, unique_states,
       concurrency_key, holds_slot, ran_on, run_time
FROM conveyor_jobs;

INSERT INTO sqlite_sequence (name, seq)
SELECT 'conveyor_jobs_rebuilt', seq FROM sqlite_sequence WHERE name = 'conveyor_jobs';

DROP VIEW IF EXISTS conveyor_queue_depth;
DROP TABLE conveyor_jobs;
ALTER TABLE conveyor_jobs_rebuilt RENAME TO conveyor_jobs;

CREATE INDEX IF NOT EXISTS conveyor_jobs_fetch_idx
    ON conveyor_jobs (queue, priority DESC, scheduled_at, id) WHERE state = 'available';
CREATE INDEX IF NOT EXISTS conveyor_jobs_stage_idx
    ON conveyor_jobs (scheduled_at) WHERE state IN ('scheduled', 'retryable');
CREATE INDEX IF NOT EXISTS conveyor_jobs_lease_idx
    ON conveyor_jobs (lease_expires_at) WHERE state = 'running';
CREATE INDEX IF NOT EXISTS conveyor_jobs_task_idx ON conveyor_jobs (task, id);
CREATE UNIQUE INDEX IF NOT EXISTS conveyor_jobs_unique_idx ON conveyor_jobs (unique_key)
    WHERE unique_key IS NOT NULL AND instr(unique_states, ',' || state || ',') > 0;
CREATE INDEX IF NOT EXISTS conveyor_jobs_concurrency_idx ON conveyor_jobs (concurrency_key)
    WHERE state = 'running' AND holds_slot = 1;
CREATE INDEX IF NOT EXISTS conveyor_jobs_finished_idx ON conveyor_jobs (state, finished_at)
    WHERE finished_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS conveyor_jobs_state_idx ON conveyor_jobs (state, queue, id)
    WHERE state NOT IN ('available', 'running');
CREATE INDEX IF NOT EXISTS conveyor_jobs_workflow_idx ON conveyor_jobs (workflow_id, id)
    WHERE workflow_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS conveyor_jobs_batch_idx ON conveyor_jobs (batch_id, id)
    WHERE batch_id IS NOT NULL;

-- The depth view now counts pending jobs too (from the cold state index).
CREATE VIEW IF NOT EXISTS conveyor_queue_depth AS
    SELECT queue, 'available' AS state, count(*) AS n FROM conveyor_jobs
    WHERE state = 'available' GROUP BY queue
    UNION ALL
    SELECT queue, 'running', count(*) FROM conveyor_jobs
    WHERE state = 'running' GROUP BY queue
    UNION ALL
    SELECT queue, state, count(*) FROM conveyor_jobs
    WHERE state IN ('pending', 'scheduled', 'retryable') AND state NOT IN ('available', 'running')
    GROUP BY queue, state;

-- One row per dependency edge: job_id waits on depends_on. on_failure is the policy
-- applied when depends_on ends discarded or cancelled; settled is set once the edge
-- counted (a dependency retried and finished again does not count twice).
CREATE TABLE IF NOT EXISTS conveyor_job_deps (
    job_id     INTEGER NOT NULL,
    depends_on INTEGER NOT NULL,
    on_failure TEXT    NOT NULL DEFAULT 'cancel'
                       CHECK (on_failure IN ('cancel', 'run', 'run_with_failure')),
    settled    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, depends_on)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS conveyor_job_deps_depends_on_idx
    ON conveyor_job_deps (depends_on, job_id);

-- A batch: O(1) counters updated by each member's final state, and its callbacks
-- (pending jobs, stored at creation so that a crash cannot lose them).
CREATE TABLE IF NOT EXISTS conveyor_batches (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    open        INTEGER NOT NULL DEFAULT 1,
    total       INTEGER NOT NULL DEFAULT 0 CHECK (total >= 0),
    completed   INTEGER NOT NULL DEFAULT 0,
    discarded   INTEGER NOT NULL DEFAULT 0,
    cancelled   INTEGER NOT NULL DEFAULT 0,
    on_success  INTEGER,
    on_complete INTEGER,
    on_discard  INTEGER,
    created_at  REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    finished_at REAL,
    meta        TEXT    NOT NULL DEFAULT '{}'
);

-- Release: a pending job whose last dependency is settled becomes available (or
-- scheduled when its run_at is later); a chord's callback gets the results in order.
CREATE TRIGGER IF NOT EXISTS conveyor_jobs_release AFTER UPDATE OF deps_pending ON conveyor_jobs
WHEN NEW.state = 'pending' AND NEW.deps_pending <= 0
BEGIN
    UPDATE conveyor_jobs
    SET state = CASE WHEN scheduled_at > (julianday('now') - 2440587.5) * 86400.0
                     THEN 'scheduled' ELSE 'available' END,
        kwargs = CASE WHEN results_arg IS NULL THEN kwargs ELSE json_set(kwargs,
            '$."' || results_arg || '"',
            (SELECT json_group_array(json(r.value)) FROM (
                SELECT CASE WHEN x.state = 'completed' THEN coalesce(x.result, 'null')
                            WHEN d.on_failure = 'run_with_failure' THEN json_object(
                                'job_id', x.id, 'state', x.state,
                                'error', json_extract(x.errors, '$[#-1]'))
                            ELSE 'null' END AS value
                FROM conveyor_job_deps AS d JOIN conveyor_jobs AS x ON x.id = d.depends_on
                WHERE d.job_id = NEW.id ORDER BY d.depends_on) AS r)) END
    WHERE id = NEW.id;
END;

-- Settle: a job with followers became final. Its dependents run (or are cancelled, per
-- the edge's policy, which cascades through this same trigger), and its batch counts it.
CREATE TRIGGER IF NOT EXISTS conveyor_jobs_settle AFTER UPDATE OF state ON conveyor_jobs
WHEN NEW.followers = 1 AND NEW.state IN ('completed', 'cancelled', 'discarded')
     AND OLD.state NOT IN ('completed', 'cancelled', 'discarded')
BEGIN
    UPDATE conveyor_jobs
    SET state = 'cancelled', finished_at = (julianday('now') - 2440587.5) * 86400.0
    WHERE NEW.state <> 'completed' AND state = 'pending' AND id IN (
        SELECT job_id FROM conveyor_job_deps
        WHERE depends_on = NEW.id AND settled = 0 AND on_failure = 'cancel');
    UPDATE conveyor_jobs SET deps_pending = deps_pending - 1
    WHERE state = 'pending' AND id IN (
        SELECT job_id FROM conveyor_job_deps WHERE depends_on = NEW.id AND settled = 0);
    UPDATE conveyor_job_deps SET settled = 1 WHERE depends_on = NEW.id AND settled = 0;
    UPDATE conveyor_batches
    SET completed = completed + (NEW.state = 'completed'),
        discarded = discarded + (NEW.state = 'discarded'),
        cancelled = cancelled + (NEW.state = 'cancelled')
    WHERE id = NEW.batch_id;
    -- on_discard runs once, at the first discarded job
    UPDATE conveyor_jobs SET deps_pending = 0
    WHERE NEW.state = 'discarded' AND state = 'pending' AND id = (
        SELECT on_discard FROM conveyor_batches WHERE id = NEW.batch_id);
END;

-- A retried member leaves its final state: its batch stops counting it there.
CREATE TRIGGER IF NOT EXISTS conveyor_jobs_unsettle AFTER UPDATE OF state ON conveyor_jobs
WHEN NEW.followers = 1 AND NEW.batch_id IS NOT NULL
     AND OLD.state IN ('completed', 'cancelled', 'discarded')
     AND NEW.state NOT IN ('completed', 'cancelled', 'discarded')
BEGIN
    UPDATE conveyor_batches
    SET completed = completed - (OLD.state = 'completed'),
        discarded = discarded - (OLD.state = 'discarded'),
        cancelled = cancelled - (OLD.state = 'cancelled')
    WHERE id = NEW.batch_id;
END;

-- Deleting a job that has followers before it is final counts as its cancellation.
CREATE TRIGGER IF NOT EXISTS conveyor_jobs_settle_deleted AFTER DELETE ON conveyor_jobs
WHEN OLD.followers = 1 AND OLD.state NOT IN ('completed', 'cancelled', 'discarded')
BEGIN
    UPDATE conveyor_jobs
    SET state = 'cancelled', finished_at = (julianday('now') - 2440587.5) * 86400.0
    WHERE state = 'pending' AND id IN (
        SELECT job_id FROM conveyor_job_deps
        WHERE depends_on = OLD.id AND settled = 0 AND on_failure = 'cancel');
    UPDATE conveyor_jobs SET deps_pending = deps_pending - 1
    WHERE state = 'pending' AND id IN (
        SELECT job_id FROM conveyor_job_deps WHERE depends_on = OLD.id AND settled = 0);
    UPDATE conveyor_job_deps SET settled = 1 WHERE depends_on = OLD.id AND settled = 0;
    UPDATE conveyor_batches SET cancelled = cancelled + 1 WHERE id = OLD.batch_id;
END;

-- A closed batch whose every job is final finishes once: on_complete runs, on_success
-- runs when every job completed (else it is cancelled), an unused on_discard is cancelled.
CREATE TRIGGER IF NOT EXISTS conveyor_batches_finish AFTER UPDATE ON conveyor_batches
WHEN NEW.finished_at IS NULL AND NEW.open = 0
     AND NEW.completed + NEW.discarded + NEW.cancelled >= NEW.total
BEGIN
    UPDATE conveyor_batches SET finished_at = (julianday('now') - 2440587.5) * 86400.0
    WHERE id = NEW.id;
    UPDATE conveyor_jobs SET deps_pending = 0
    WHERE state = 'pending' AND (id = NEW.on_complete
                                 OR (id = NEW.on_success AND NEW.completed >= NEW.total));
    UPDATE conveyor_jobs
    SET state = 'cancelled', finished_at = (julianday('now') - 2440587.5) * 86400.0
    WHERE state = 'pending' AND (id = NEW.on_discard
                                 OR (id = NEW.on_success AND NEW.completed < NEW.total));
END;
