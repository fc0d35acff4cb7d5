-- History (conveyor_jobs_history), PostgreSQL dialect: the archiver's moves, the way
-- back for a retry, deletes that reach finished jobs, retention.
-- A move is one transaction of three statements: pick (locking), copy, delete; both
-- tables have the same columns in the same order, so rows move with SELECT *.

-- name: job_archive_rule
-- THE archiving rule, the one place it is written: which finished row may leave the hot
-- table, {state} being its final state. Not while it holds a unique claim (its
-- unique_states name its final state: the unique index lives on the hot table, so it
-- stays until pruned). Placed as {job_archive_rule:EXPR} (schema.py) in the archiver's
-- pick and in job_ack_retire (jobs_plain.sql), which moves a plain completion at its ack.
-- Extend it here, in both dialects, when another column must keep a row hot.
(unique_key IS NULL OR strpos(coalesce(unique_states, ''), ',' || {state} || ',') = 0)

-- name: job_archive_pick
-- A finished job older than %(after)s seconds that the archiving rule lets go.
SELECT id FROM conveyor_jobs
WHERE state IN ('completed', 'cancelled', 'discarded') AND state NOT IN ('available', 'running')
  AND finished_at <= now() - %(after)s::float8 * interval '1 second'
  AND {job_archive_rule:state}
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: job_archive_copy
INSERT INTO conveyor_jobs_history
SELECT * FROM conveyor_jobs WHERE id = ANY(%(ids)s::bigint[]);

-- name: job_archive_delete
DELETE FROM conveyor_jobs WHERE id = ANY(%(ids)s::bigint[]);

-- name: job_history_pick
-- Jobs of history by id, locked: the first step of moving them back (a retry).
SELECT id, task, queue, state, attempt FROM conveyor_jobs_history
WHERE id = ANY(%(ids)s::bigint[])
FOR UPDATE;

-- name: job_history_pick_matching
-- As job_pick_matching (search.sql), on history: the finished jobs a bulk retry moves back.
SELECT j.id, j.task, j.queue, j.state, j.attempt FROM conveyor_jobs_history AS j
WHERE j.state = ANY(%(allowed)s::text[])
  AND (%(states)s::text[] IS NULL OR j.state = ANY(%(states)s::text[]))
  AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR j.task = %(task)s::text)
  AND (%(tag)s::text IS NULL OR j.tags ? %(tag)s::text)
  AND (%(text)s::text IS NULL
       OR strpos(lower(j.args::text || ' ' || j.kwargs::text), lower(%(text)s::text)) > 0)
  AND (%(error_key)s::text IS NULL
       OR left(split_part(coalesce(j.errors -> -1 ->> 'error', ''), E'\n', 1), 200)
          = %(error_key)s::text)
  AND (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
  AND j.id >= coalesce(%(min_id)s::bigint, 0)
  AND j.id <= coalesce(%(max_id)s::bigint, 9223372036854775807)
ORDER BY j.id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: job_history_restore
-- Back into the hot table with its own id.
INSERT INTO conveyor_jobs OVERRIDING SYSTEM VALUE
SELECT * FROM conveyor_jobs_history WHERE id = ANY(%(ids)s::bigint[]);

-- name: job_history_delete
DELETE FROM conveyor_jobs_history WHERE id = ANY(%(ids)s::bigint[])
RETURNING *;

-- name: job_history_purge_ids
-- As job_purge_ids (maintenance.sql), on history.
DELETE FROM conveyor_jobs_history
WHERE id = ANY(%(ids)s::bigint[])
  AND state = ANY(%(states)s::text[])
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
  AND (%(older_than)s::float8 IS NULL OR coalesce(finished_at, created_at)
       < now() - %(older_than)s::float8 * interval '1 second')
RETURNING id, task, queue, state, attempt;

-- name: job_history_prune
-- As job_prune (control.sql), on history: the rows no dropped partition took (a shorter
-- retention than the longest, the DEFAULT partitions).
DELETE FROM conveyor_jobs_history
WHERE id = ANY(ARRAY(
    SELECT id FROM conveyor_jobs_history
    WHERE ((state IN ('completed', 'cancelled')
            AND finished_at < now() - %(completed_age)s::float8 * interval '1 second')
        OR (state = 'discarded'
            AND finished_at < now() - %(discarded_age)s::float8 * interval '1 second'))
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND (%(queue)s::text IS NOT NULL
           OR queue <> ALL(ARRAY(SELECT jsonb_array_elements_text(%(exclude)s::jsonb))))
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
))
RETURNING id;

-- name: job_history_drop
-- Whole days past the longest retention of their class: detach and drop (how many rows).
SELECT conveyor_history_drop('done', now() - %(completed_age)s::float8 * interval '1 second')
       + conveyor_history_drop('discarded',
                               now() - %(discarded_age)s::float8 * interval '1 second') AS n;

-- name: job_history_prepare
-- Day partitions ahead (today and %(days)s more), so the archiver never writes to DEFAULT.
SELECT conveyor_history_prepare(now(), %(days)s::integer) AS n;
