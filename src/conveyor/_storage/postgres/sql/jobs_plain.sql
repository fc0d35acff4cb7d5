-- Plain variants of job_insert and job_ack (jobs.sql): narrower statements for the
-- common case. Keep them in step with jobs.sql.

-- name: job_insert_plain
-- job_insert for a batch without unique keys: no ON CONFLICT, and only what the
-- database decided comes back (the caller has the rest), in request order.
WITH inserted AS (
    INSERT INTO conveyor_jobs
        (task, queue, args, kwargs, priority, max_attempts, tags, meta, state,
         scheduled_at, created_at, concurrency_key)
    SELECT b.task, b.queue, b.args::jsonb, b.kwargs::jsonb, b.priority, b.max_attempts,
           b.tags::jsonb, b.meta::jsonb,
           CASE WHEN d.due > now() THEN 'scheduled' ELSE 'available' END, d.due, now(),
           b.concurrency_key
    FROM unnest(%(task)b::text[], %(queue)b::text[], %(args)b::text[], %(kwargs)b::text[],
                %(priority)b::smallint[], %(max_attempts)b::integer[], %(tags)b::text[],
                %(meta)b::text[], %(delay)b::float8[], %(run_at)b::timestamptz[],
                %(concurrency_key)b::text[])
         WITH ORDINALITY
         AS b(task, queue, args, kwargs, priority, max_attempts, tags, meta, delay, run_at,
              concurrency_key, ord)
    CROSS JOIN LATERAL (
        SELECT coalesce(b.run_at, now() + coalesce(b.delay, 0) * interval '1 second') AS due
    ) AS d
    ORDER BY b.ord
    RETURNING id, queue, state, scheduled_at, created_at
), woken AS (
    SELECT count(pg_notify(%(channel)s, q.queue)) AS n
    FROM (SELECT DISTINCT queue FROM inserted) AS q
)
SELECT inserted.id, inserted.state, inserted.scheduled_at, inserted.created_at
FROM inserted CROSS JOIN woken
ORDER BY inserted.id;

-- name: job_completed_set
-- What a plain completion writes, one "column = value" a line (schema.py reads them):
-- job_ack_completed's SET, and the values job_ack_retire writes into history. Typed, as
-- a row going to history is built from them, not an UPDATE's target.
state = 'completed'::text,
finished_at = now(),
result = a.result::jsonb,
ran_on = %(node)s::text,
run_time = a.run_time,
lease_owner = NULL::text,
lease_token = NULL::bigint,
lease_expires_at = NULL::timestamptz

-- name: job_ack_completed_update
-- A fragment (schema.FRAGMENTS): the fenced UPDATE of a batch of plain completions, in
-- job_ack_completed and, for the rows that stay hot, in job_ack_retire.
-- No "j.state = 'running'": the CHECK constraint makes a non-null lease_token mean
-- running, and that predicate lets the planner join through the state index, whose
-- estimate for 'running' goes stale fast on a queue table (a full scan of what runs,
-- and its dead versions, per ack). Without it the join can only use the primary key.
UPDATE conveyor_jobs AS j
SET {job_completed_set}
FROM unnest(%(id)b::bigint[], %(lease_token)b::bigint[], %(result)b::text[],
            %(run_time)b::float8[])
     AS a(id, lease_token, result, run_time)
WHERE j.id = a.id AND j.lease_token = a.lease_token

-- name: job_ack_completed
-- job_ack for state 'completed' with no error, no delay and no attempt change: the same
-- fence, no producer to wake (one finish notification for waiters), and only the ids
-- that applied come back.
WITH acked AS (
{job_ack_completed_update}
RETURNING j.id
), finished AS (
    SELECT count(pg_notify(%(finished_channel)s, '')) AS n
    FROM (SELECT 1 FROM acked LIMIT 1) AS f
)
SELECT acked.id FROM acked CROSS JOIN finished;

-- name: job_ack_retire
-- job_ack_completed for a worker whose archive_after is 0: a job the archiving rule
-- (history.sql) lets go, and with no followers (dependents, a batch: their triggers
-- fire on the UPDATE of state), goes straight to history, written as the UPDATE would
-- have left it; the others take the UPDATE, in the same statement. That saves the hot
-- row a new version (and its index entries) and the archiver its pick, copy and delete.
-- The same fence for both; the two sets of rows are disjoint (one statement must not
-- change a row twice), and the ids of both come back.
WITH gone AS (
    DELETE FROM conveyor_jobs AS j
    USING unnest(%(id)b::bigint[], %(lease_token)b::bigint[], %(result)b::text[],
                 %(run_time)b::float8[])
          AS a(id, lease_token, result, run_time)
    WHERE j.id = a.id AND j.lease_token = a.lease_token
      AND NOT j.followers AND {job_archive_rule:'completed'}
    RETURNING {job_columns_completed}
), moved AS (
    INSERT INTO conveyor_jobs_history ({job_columns})
    SELECT {job_columns} FROM gone
), acked AS (
    {job_ack_completed_update}
      AND a.id NOT IN (SELECT gone.id FROM gone)
    RETURNING j.id
), applied AS (
    SELECT gone.id FROM gone UNION ALL SELECT acked.id FROM acked
), finished AS (
    SELECT count(pg_notify(%(finished_channel)s, '')) AS n
    FROM (SELECT 1 FROM applied LIMIT 1) AS f
)
SELECT applied.id FROM applied CROSS JOIN finished;

-- name: job_ack_retire_delete
-- SQLite's job_ack_retire is two statements, its copy then this delete; here the one
-- statement does both. Kept for parity: nothing to delete.
SELECT NULL::bigint AS id WHERE %(acks)s::text IS NULL AND false;

-- name: job_ack_retire_delete_all
-- SQLite's delete of a batch job_ack_retire copied whole; kept for parity, as above.
SELECT NULL::bigint AS id WHERE %(acks)s::text IS NULL AND false;

-- name: job_ack_retire_setup
-- SQLite's TEMP view for job_ack_retire_at_once; nothing to make here (parity).
SELECT NULL::bigint AS id WHERE false;

-- name: job_ack_retire_at_once
-- SQLite's copy and delete of a batch in one statement outside a transaction; here
-- job_ack_retire is one statement already. Kept for parity, as above.
SELECT NULL::bigint AS id WHERE %(acks)s::text IS NULL AND false;

-- name: job_insert_one
-- job_insert_plain for one job, with scalar parameters: arrays cost the client far more
-- to send than the statement costs the server (the sync API's task.enqueue()).
WITH inserted AS (
    INSERT INTO conveyor_jobs
        (task, queue, args, kwargs, priority, max_attempts, tags, meta, state,
         scheduled_at, created_at, concurrency_key)
    SELECT %(task)s::text, %(queue)s::text, %(args)s::jsonb, %(kwargs)s::jsonb,
           %(priority)s::smallint, %(max_attempts)s::integer, %(tags)s::jsonb, %(meta)s::jsonb,
           CASE WHEN d.due > now() THEN 'scheduled' ELSE 'available' END, d.due, now(),
           %(concurrency_key)s::text
    FROM (SELECT coalesce(%(run_at)s::timestamptz,
                          now() + coalesce(%(delay)s::float8, 0) * interval '1 second') AS due) AS d
    RETURNING id, queue, state, scheduled_at, created_at
), woken AS (
    SELECT count(pg_notify(%(channel)s, queue)) AS n FROM inserted
)
SELECT inserted.id, inserted.state, inserted.scheduled_at, inserted.created_at
FROM inserted CROSS JOIN woken;

-- name: job_insert_alike
-- job_insert_plain for jobs alike but for their arguments (the calls of one task that an
-- enqueue_async pipeline batch holds): those two as arrays, the rest as job_insert_one's
-- scalars (a client sends a batch of 50 for about three fifths of the CPU the eleven
-- arrays cost).
WITH d AS MATERIALIZED (
    SELECT coalesce(%(run_at)s::timestamptz,
                    now() + coalesce(%(delay)s::float8, 0) * interval '1 second') AS due
), inserted AS (
    INSERT INTO conveyor_jobs
        (task, queue, args, kwargs, priority, max_attempts, tags, meta, state,
         scheduled_at, created_at, concurrency_key)
    SELECT %(task)s::text, %(queue)s::text, b.args::jsonb, b.kwargs::jsonb,
           %(priority)s::smallint, %(max_attempts)s::integer, %(tags)s::jsonb, %(meta)s::jsonb,
           CASE WHEN d.due > now() THEN 'scheduled' ELSE 'available' END, d.due, now(),
           %(concurrency_key)s::text
    FROM unnest(%(args)b::text[], %(kwargs)b::text[]) WITH ORDINALITY AS b(args, kwargs, ord)
    CROSS JOIN d
    ORDER BY b.ord
    RETURNING id, queue, state, scheduled_at, created_at
), woken AS (
    SELECT count(pg_notify(%(channel)s, q.queue)) AS n
    FROM (SELECT DISTINCT queue FROM inserted) AS q
)
SELECT inserted.id, inserted.state, inserted.scheduled_at, inserted.created_at
FROM inserted CROSS JOIN woken
ORDER BY inserted.id;

-- name: job_reserve_ids
-- The first statement of a COPY batch (postgres/copy_insert.py): one id per job
-- (COPY cannot return them), the transaction's now() (the jobs' creation time) and a
-- NOTIFY per queue of the batch, sent only if the COPY that follows commits.
WITH seq AS MATERIALIZED (  -- once, not once per row
    SELECT pg_get_serial_sequence('conveyor_jobs', 'id')::regclass AS id
)
SELECT now() AS now,
       ARRAY(SELECT nextval(seq.id) FROM seq, generate_series(1, %(count)s::integer)) AS ids,
       (SELECT count(pg_notify(%(channel)s, q)) FROM unnest(%(queues)s::text[]) AS q) AS woken;

-- name: job_copy_plain
-- The rows of a batch without unique keys, binary-encoded by postgres/copy_insert.py in
-- this column order; COPY accepts the reserved ids into the identity column.
COPY conveyor_jobs
    (task, queue, kwargs, priority, max_attempts, tags, meta, state, scheduled_at, created_at,
     concurrency_key, id, args)
FROM STDIN (FORMAT BINARY);
