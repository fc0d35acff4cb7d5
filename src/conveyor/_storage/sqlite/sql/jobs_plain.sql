-- Plain variants of job_insert and job_ack (jobs.sql), used by sqlite/batch.py with
-- executemany, so their parameters are positional (?). Keep them in step with jobs.sql.

-- name: job_insert_plain
-- job_insert for a batch without unique keys; state and due time are computed by the
-- caller from clock_now (control.sql), exactly as job_insert computes them.
-- (task, queue, args, kwargs, priority, max_attempts, tags, meta, state, scheduled_at,
--  created_at, concurrency_key)
INSERT INTO conveyor_jobs
    (task, queue, args, kwargs, priority, max_attempts, tags, meta, state, scheduled_at, created_at,
     concurrency_key)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: job_ack_completed
-- job_ack for state 'completed' with no error, no delay and no attempt change
-- (result, ran_on, run_time, id, lease_token). The same fence: only while this attempt
-- holds the lease.
UPDATE conveyor_jobs
SET state = 'completed',
    finished_at = (julianday('now') - 2440587.5) * 86400.0,
    result = ?,
    ran_on = ?,
    run_time = ?,
    lease_owner = NULL,
    lease_token = NULL,
    lease_expires_at = NULL
WHERE id = ? AND lease_token = ? AND state = 'running';

-- name: job_insert_one
-- PostgreSQL sends one job with scalar parameters; here executemany of job_insert_plain
-- already costs nothing per statement, so this is the same statement (kept for parity).
INSERT INTO conveyor_jobs
    (task, queue, args, kwargs, priority, max_attempts, tags, meta, state, scheduled_at, created_at,
     concurrency_key)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: job_reserve_ids
-- PostgreSQL reserves the ids of a COPY batch with this name; SQLite has no COPY, and
-- its plain batches learn their contiguous ids from last_insert_rowid() (sqlite/batch.py).
-- Kept for parity: the id the next insert will take.
SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'conveyor_jobs'), 0) + 1 AS id;

-- name: job_copy_plain
-- PostgreSQL's COPY of a plain batch; here executemany of job_insert_plain is already the
-- bulk path, so this is the same statement (kept for parity).
INSERT INTO conveyor_jobs
    (task, queue, args, kwargs, priority, max_attempts, tags, meta, state, scheduled_at, created_at,
     concurrency_key)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);
