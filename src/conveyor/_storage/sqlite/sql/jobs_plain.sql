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
-- job_ack for state 'completed' with no error, no delay and no attempt change, for a
-- whole batch in one statement: :acks is a JSON array of [id, lease_token, result,
-- run_time] (result as JSON text in a string, or null). One statement, not one per row
-- (executemany): a statement's setup (the trigger programs' frames, the state CHECK's
-- list) is paid once per batch, which made a plain ack cost 2.5x more per row. The same
-- fence: only while this attempt holds the lease; a fenced-off ack is simply not
-- updated, which the caller sees in the row count.
UPDATE conveyor_jobs
SET state = 'completed',
    finished_at = (julianday('now') - 2440587.5) * 86400.0,
    result = a.value ->> 2,
    ran_on = :node,
    run_time = a.value ->> 3,
    lease_owner = NULL,
    lease_token = NULL,
    lease_expires_at = NULL
FROM json_each(:acks) AS a
WHERE conveyor_jobs.id = a.value ->> 0 AND conveyor_jobs.lease_token = a.value ->> 1
  AND conveyor_jobs.state = 'running';

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
