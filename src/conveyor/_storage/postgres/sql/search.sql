-- Search queries (dashboard, CLI), PostgreSQL dialect: filtered search with keyset pages, counts that
-- stop at a cap, failure groups, bulk actions on everything matching a filter, health.
-- A filter's empty parts are NULL; these queries run unprepared, so the planner sees
-- the actual values and drops the parts that are NULL.
-- A failure's key is the first line of its last error, at most 200 characters.

-- name: job_task_parts
-- A fragment (schema.FRAGMENTS): the parts of conveyor_jobs_split (schema 22), as j, a
-- read takes. Without a task filter, the whole hot table; with one, its rows that are
-- not running (in the task index, which running rows never enter: a claim pays nothing
-- there) and its running ones (from the lease index). These reads run unprepared, so
-- the planner folds the CASE and proves the task index's predicate from what is left.
CASE WHEN %(task)s::text IS NULL THEN NOT j.running_part
     ELSE (j.state = 'running') = j.running_part END

-- name: job_search
SELECT j.* FROM conveyor_jobs_split AS j
WHERE (%(states)s::text[] IS NULL OR j.state = ANY(%(states)s::text[]))
  AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR j.task = %(task)s::text) AND {job_task_parts}
  AND (%(tag)s::text IS NULL OR j.tags ? %(tag)s::text)
  AND (%(args)s::jsonb IS NULL OR j.kwargs @> %(args)s::jsonb)
  AND (%(text)s::text IS NULL
       OR strpos(lower(j.args::text || ' ' || j.kwargs::text), lower(%(text)s::text)) > 0)
  AND (%(error_key)s::text IS NULL
       OR left(split_part(coalesce(j.errors -> -1 ->> 'error', ''), E'\n', 1), 200)
          = %(error_key)s::text)
  AND (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
  AND j.id >= coalesce(%(min_id)s::bigint, 0)
  AND j.id <= coalesce(%(max_id)s::bigint, 9223372036854775807)
  AND j.id < coalesce(%(before_id)s::bigint, 9223372036854775807)
ORDER BY j.id DESC
LIMIT %(limit)s;

-- name: job_search_newer
-- The page after ``after_id`` towards the newest job, read upwards (the caller reverses it).
SELECT j.* FROM conveyor_jobs_split AS j
WHERE (%(states)s::text[] IS NULL OR j.state = ANY(%(states)s::text[]))
  AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR j.task = %(task)s::text) AND {job_task_parts}
  AND (%(tag)s::text IS NULL OR j.tags ? %(tag)s::text)
  AND (%(args)s::jsonb IS NULL OR j.kwargs @> %(args)s::jsonb)
  AND (%(text)s::text IS NULL
       OR strpos(lower(j.args::text || ' ' || j.kwargs::text), lower(%(text)s::text)) > 0)
  AND (%(error_key)s::text IS NULL
       OR left(split_part(coalesce(j.errors -> -1 ->> 'error', ''), E'\n', 1), 200)
          = %(error_key)s::text)
  AND (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
  AND j.id >= coalesce(%(min_id)s::bigint, 0)
  AND j.id <= coalesce(%(max_id)s::bigint, 9223372036854775807)
  AND j.id > %(after_id)s::bigint
ORDER BY j.id
LIMIT %(limit)s;

-- name: job_count_capped
SELECT count(*) AS n FROM (
    SELECT 1 FROM conveyor_jobs_split AS j
    WHERE (%(states)s::text[] IS NULL OR j.state = ANY(%(states)s::text[]))
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (%(task)s::text IS NULL OR j.task = %(task)s::text) AND {job_task_parts}
      AND (%(tag)s::text IS NULL OR j.tags ? %(tag)s::text)
      AND (%(args)s::jsonb IS NULL OR j.kwargs @> %(args)s::jsonb)
  AND (%(args)s::jsonb IS NULL OR j.kwargs @> %(args)s::jsonb)
      AND (%(text)s::text IS NULL
           OR strpos(lower(j.args::text || ' ' || j.kwargs::text), lower(%(text)s::text)) > 0)
      AND (%(error_key)s::text IS NULL
           OR left(split_part(coalesce(j.errors -> -1 ->> 'error', ''), E'\n', 1), 200)
              = %(error_key)s::text)
      AND (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
      AND j.id >= coalesce(%(min_id)s::bigint, 0)
      AND j.id <= coalesce(%(max_id)s::bigint, 9223372036854775807)
    LIMIT %(cap)s
) AS c;

-- name: job_count_by_queue
-- Exact counts of the waiting and running states, the queues' depth.
SELECT queue, state, n FROM conveyor_queue_depth;

-- name: job_count_final_capped
SELECT 'completed' AS state, count(*) AS n
FROM (SELECT 1 FROM conveyor_jobs_all WHERE state = 'completed' AND state NOT IN ('available', 'running') LIMIT %(cap)s) AS c
UNION ALL
SELECT 'cancelled', count(*)
FROM (SELECT 1 FROM conveyor_jobs_all WHERE state = 'cancelled' AND state NOT IN ('available', 'running') LIMIT %(cap)s) AS c
UNION ALL
SELECT 'discarded', count(*)
FROM (SELECT 1 FROM conveyor_jobs_all WHERE state = 'discarded' AND state NOT IN ('available', 'running') LIMIT %(cap)s) AS c;

-- name: job_count_final_by_queue
-- Exact counts of the final states per queue (`conveyor queues list`): one pass over
-- the cold state index, whose WHERE term is repeated for SQLite.
SELECT queue, state, count(*) AS n FROM conveyor_jobs_all
WHERE state IN ('completed', 'cancelled', 'discarded') AND state NOT IN ('available', 'running')
GROUP BY queue, state;

-- name: job_failure_groups
SELECT f.task, f.error,
       count(*) FILTER (WHERE f.state = 'retryable') AS retryable,
       count(*) FILTER (WHERE f.state = 'discarded') AS discarded,
       max(f.id) AS last_id,
       max(coalesce(f.finished_at, f.attempted_at, f.scheduled_at)) AS last_at
FROM (
    SELECT j.id, j.task, j.state, j.finished_at, j.attempted_at, j.scheduled_at,
           left(split_part(coalesce(j.errors -> -1 ->> 'error', ''), E'\n', 1), 200) AS error
    FROM conveyor_jobs_all AS j
    WHERE j.state IN ('retryable', 'discarded') AND j.state NOT IN ('available', 'running')
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (%(task)s::text IS NULL OR j.task = %(task)s::text)
    ORDER BY j.id DESC
    LIMIT %(scan)s
) AS f
GROUP BY f.task, f.error
ORDER BY count(*) DESC, max(f.id) DESC
LIMIT %(limit)s;

-- name: job_pick_matching
-- The first step of a bulk action, in its transaction: lock up to ``limit`` jobs that
-- match the filter and are in one of the ``allowed`` states, oldest first.
SELECT j.id, j.task, j.queue, j.state, j.attempt FROM conveyor_jobs AS j
WHERE j.state = ANY(%(allowed)s::text[])
  AND (%(states)s::text[] IS NULL OR j.state = ANY(%(states)s::text[]))
  AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR j.task = %(task)s::text)
  AND (%(tag)s::text IS NULL OR j.tags ? %(tag)s::text)
  AND (%(args)s::jsonb IS NULL OR j.kwargs @> %(args)s::jsonb)
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

-- name: job_retry_ids
-- As job_retry, for many jobs (picked by job_pick_matching in the same transaction).
WITH retried AS (
    UPDATE conveyor_jobs
    SET state = 'available',
        scheduled_at = now(),
        finished_at = NULL,
        max_attempts = GREATEST(max_attempts, attempt + 1),
        cancel_requested = false,
        expires_at = NULL
    WHERE id = ANY(%(ids)s::bigint[])
      AND state IN ('scheduled', 'retryable', 'completed', 'cancelled', 'discarded')
    RETURNING id, queue
), woken AS (
    SELECT count(pg_notify(%(channel)s, q.queue)) AS n
    FROM (SELECT DISTINCT queue FROM retried) AS q
)
SELECT retried.id FROM retried CROSS JOIN woken;

-- name: job_discard_ids
-- Waiting jobs only: a running job is cancelled instead, through its worker.
WITH discarded AS (
    UPDATE conveyor_jobs
    SET state = 'discarded',
        finished_at = now(),
        errors = errors || jsonb_build_array(%(error)s::jsonb || jsonb_build_object(
                     'attempt', attempt,
                     'at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))
    WHERE id = ANY(%(ids)s::bigint[]) AND state IN ('pending', 'scheduled', 'available', 'retryable')
    RETURNING id
), finished AS (
    SELECT count(pg_notify(%(finished_channel)s, '')) AS n
    FROM (SELECT 1 FROM discarded LIMIT 1) AS f
)
SELECT discarded.id FROM discarded CROSS JOIN finished;

-- name: job_count_running_by_node
SELECT lease_owner AS node, count(*) AS n FROM conveyor_jobs
WHERE state = 'running'
GROUP BY lease_owner;

-- name: schema_version
SELECT coalesce(max(version), 0) AS version FROM conveyor_migrations;

-- name: job_count_requiring
-- Waiting jobs that require worker labels, per queue and requirement (the dashboard);
-- read from the requirement index, which holds those jobs only.
SELECT queue, requires, count(*) AS n FROM conveyor_jobs
WHERE requires IS NOT NULL AND state IN ('pending', 'scheduled', 'available', 'retryable')
GROUP BY queue, requires
ORDER BY queue, n DESC
LIMIT %(limit)s;
