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

-- name: job_completed_set
-- What a plain completion writes, one "column = value" a line (schema.py reads them):
-- job_ack_completed's SET, and the values job_ack_retire writes into history.
state = 'completed',
finished_at = (julianday('now') - 2440587.5) * 86400.0,
result = a.value ->> 2,
ran_on = :node,
run_time = a.value ->> 3,
lease_owner = NULL,
lease_token = NULL,
lease_expires_at = NULL

-- name: job_ack_completed
-- job_ack for state 'completed' with no error, no delay and no attempt change, for a
-- whole batch in one statement: :acks is a JSON array of [id, lease_token, result,
-- run_time] (result as JSON text in a string, or null). One statement, not one per row
-- (executemany): a statement's setup (the trigger programs' frames, the state CHECK's
-- list) is paid once per batch, which made a plain ack cost 2.5x more per row. The same
-- fence: only while this attempt holds the lease; a fenced-off ack is simply not
-- updated, which the caller sees in the row count.
UPDATE conveyor_jobs
SET {job_completed_set}
FROM json_each(:acks) AS a
WHERE conveyor_jobs.id = a.value ->> 0 AND conveyor_jobs.lease_token = a.value ->> 1
  AND conveyor_jobs.state = 'running';

-- name: job_ack_retire_rows
-- A fragment (schema.FRAGMENTS): the rows of a batch of plain completions that go
-- straight to history, as the update would have left them: a job the archiving rule
-- (history.sql) lets go, with no followers (dependents, a batch: their triggers fire on
-- the UPDATE of state), and only while this attempt holds the lease (the same fence).
SELECT {job_columns_completed}
FROM json_each(:acks) AS a JOIN conveyor_jobs AS j ON j.id = a.value ->> 0
WHERE j.lease_token = a.value ->> 1 AND j.state = 'running'
  AND j.followers = 0 AND {job_archive_rule:'completed'}

-- name: job_ack_retire
-- job_ack_completed for a worker whose archive_after is 0, first of two statements
-- (sqlite/batch.py): the jobs of job_ack_retire_rows are copied to history;
-- job_ack_retire_delete then takes them out of the hot table, and job_ack_completed
-- updates the others. That saves the hot row its update (and its index entries) and
-- the archiver its pick, copy and delete. No RETURNING: the row count says whether
-- every job of the batch moved (the usual case), and RETURNING made each row a step of
-- its own, where the sqlite3 module lets go of the GIL and waits to take it back.
INSERT INTO conveyor_jobs_history ({job_columns})
{job_ack_retire_rows};

-- name: job_ack_retire_at_once
-- job_ack_retire and its delete as one statement run on its own, outside a transaction
-- (sqlite/retiring.py): the batch, inserted as one row into a view, fires that view's
-- INSTEAD OF trigger once (job_ack_retire_setup), which moves it. One statement is one
-- step of the sqlite3 module, all of it without the GIL: it runs while the worker's
-- loop runs the jobs just claimed, where each step of a transaction of four waited for
-- the loop.
INSERT INTO conveyor_acks_retiring (acks, node) VALUES (:acks, :node);

-- name: job_ack_retire_setup
-- What job_ack_retire_at_once writes through, made once per connection as TEMP objects
-- (sqlite/retiring.py): no migration carries them, no other connection sees them. The
-- trigger copies the batch as job_ack_retire does (its :acks and :node read from the
-- inserted row: a trigger takes no parameters), notes the ids copied (found in both
-- tables: a job of the batch already in history from elsewhere is in history only) in
-- conveyor_retired, cleared first, and deletes those from the hot table.
CREATE TEMP TABLE IF NOT EXISTS conveyor_retired (id INTEGER NOT NULL);
CREATE TEMP VIEW IF NOT EXISTS conveyor_acks_retiring AS
SELECT NULL AS acks, NULL AS node WHERE 0;
CREATE TEMP TRIGGER IF NOT EXISTS conveyor_acks_retiring_insert
INSTEAD OF INSERT ON conveyor_acks_retiring
BEGIN
    INSERT INTO conveyor_jobs_history ({job_columns})
    {job_ack_retire_rows};
    DELETE FROM conveyor_retired;
    INSERT INTO conveyor_retired (id)
    SELECT h.id FROM json_each(:acks) AS a
    JOIN conveyor_jobs_history AS h ON h.id = a.value ->> 0
    JOIN conveyor_jobs AS j ON j.id = h.id;
    DELETE FROM conveyor_jobs WHERE id IN (SELECT id FROM conveyor_retired);
END;

-- name: job_ack_retire_delete
-- The jobs job_ack_retire just copied, when it copied only some of the batch: a job is
-- in one table at a time, so those of the batch found in history are they; their ids
-- come back.
DELETE FROM conveyor_jobs
WHERE id IN (SELECT h.id FROM json_each(:acks) AS a
             JOIN conveyor_jobs_history AS h ON h.id = a.value ->> 0)
RETURNING id;

-- name: job_ack_retire_delete_all
-- The same when job_ack_retire copied the whole batch (its row count is the batch's):
-- the acks' own ids, without looking each one up in history.
DELETE FROM conveyor_jobs
WHERE id IN (SELECT a.value ->> 0 FROM json_each(:acks) AS a);

-- name: job_insert_one
-- PostgreSQL sends one job with scalar parameters; here executemany of job_insert_plain
-- already costs nothing per statement, so this is the same statement (kept for parity).
INSERT INTO conveyor_jobs
    (task, queue, args, kwargs, priority, max_attempts, tags, meta, state, scheduled_at, created_at,
     concurrency_key)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: job_insert_alike
-- job_insert_plain for jobs alike but for their arguments: one statement over a JSON
-- array of their arguments (:calls), the rest bound once (sqlite/batch.py). Each
-- execution of an insert on this table sets up its trigger programs and checks again
-- (as job_ack_completed's comment says), which cost executemany about twice the rows'
-- own work. :calls holds args_json strings when the keyword arguments are alike too
-- (:kwargs), else [args_json, kwargs_json] pairs. Rows go in in array order, so their
-- AUTOINCREMENT ids are in input order.
INSERT INTO conveyor_jobs
    (task, queue, args, kwargs, priority, max_attempts, tags, meta, state, scheduled_at,
     created_at, concurrency_key)
SELECT :task, :queue,
       CASE a.type WHEN 'text' THEN a.value ELSE a.value ->> 0 END,
       CASE a.type WHEN 'text' THEN :kwargs ELSE a.value ->> 1 END,
       :priority, :max_attempts, :tags, :meta, :state, :due, :now, :concurrency_key
FROM json_each(:calls) AS a
ORDER BY a.key;

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
