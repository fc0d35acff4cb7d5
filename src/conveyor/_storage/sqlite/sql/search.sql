-- Search queries (dashboard, CLI), SQLite dialect: filtered search with keyset pages, counts that
-- stop at a cap, failure groups, bulk actions on everything matching a filter, health.
-- A filter's empty parts are NULL. :states is a comma-wrapped list (',a,b,'), :ids a
-- JSON array. A failure's key is the first line of its last error, at most 200
-- characters (PostgreSQL: left(split_part(error, E'\n', 1), 200)).

-- name: job_search
SELECT j.* FROM conveyor_jobs_all AS j
WHERE (:states IS NULL OR instr(:states, ',' || j.state || ',') > 0)
  AND (:queue IS NULL OR j.queue = :queue)
  AND (:task IS NULL OR j.task = :task)
  AND (:tag IS NULL OR EXISTS (SELECT 1 FROM json_each(j.tags) AS t WHERE t.value = :tag))
  AND (:args_paths IS NULL OR NOT EXISTS (SELECT 1 FROM json_each(:args_paths) AS p
       WHERE json_extract(j.kwargs, json_extract(p.value, '$[0]')) IS NOT json_extract(p.value, '$[1]')
          OR replace(replace(coalesce(json_type(j.kwargs, json_extract(p.value, '$[0]')), ''), 'integer', 'real'), 'true', 'false')
             IS NOT json_extract(p.value, '$[2]')))
  AND (:text IS NULL OR instr(lower(j.args || ' ' || j.kwargs), lower(:text)) > 0)
  AND (:error_key IS NULL OR substr(coalesce(json_extract(j.errors, '$[#-1].error'), ''), 1,
                  CASE WHEN instr(coalesce(json_extract(j.errors, '$[#-1].error'), ''), char(10)) BETWEEN 1 AND 201
                       THEN instr(coalesce(json_extract(j.errors, '$[#-1].error'), ''), char(10)) - 1 ELSE 200 END) = :error_key)
  AND (:ids IS NULL OR j.id IN (SELECT value FROM json_each(:ids)))
  AND j.id >= coalesce(:min_id, 0)
  AND j.id <= coalesce(:max_id, 9223372036854775807)
  AND j.id < coalesce(:before_id, 9223372036854775807)
ORDER BY j.id DESC
LIMIT :limit;

-- name: job_search_newer
-- The page after :after_id towards the newest job, read upwards (the caller reverses it).
SELECT j.* FROM conveyor_jobs_all AS j
WHERE (:states IS NULL OR instr(:states, ',' || j.state || ',') > 0)
  AND (:queue IS NULL OR j.queue = :queue)
  AND (:task IS NULL OR j.task = :task)
  AND (:tag IS NULL OR EXISTS (SELECT 1 FROM json_each(j.tags) AS t WHERE t.value = :tag))
  AND (:args_paths IS NULL OR NOT EXISTS (SELECT 1 FROM json_each(:args_paths) AS p
       WHERE json_extract(j.kwargs, json_extract(p.value, '$[0]')) IS NOT json_extract(p.value, '$[1]')
          OR replace(replace(coalesce(json_type(j.kwargs, json_extract(p.value, '$[0]')), ''), 'integer', 'real'), 'true', 'false')
             IS NOT json_extract(p.value, '$[2]')))
  AND (:text IS NULL OR instr(lower(j.args || ' ' || j.kwargs), lower(:text)) > 0)
  AND (:error_key IS NULL OR substr(coalesce(json_extract(j.errors, '$[#-1].error'), ''), 1,
                  CASE WHEN instr(coalesce(json_extract(j.errors, '$[#-1].error'), ''), char(10)) BETWEEN 1 AND 201
                       THEN instr(coalesce(json_extract(j.errors, '$[#-1].error'), ''), char(10)) - 1 ELSE 200 END) = :error_key)
  AND (:ids IS NULL OR j.id IN (SELECT value FROM json_each(:ids)))
  AND j.id >= coalesce(:min_id, 0)
  AND j.id <= coalesce(:max_id, 9223372036854775807)
  AND j.id > :after_id
ORDER BY j.id
LIMIT :limit;

-- name: job_count_capped
SELECT count(*) AS n FROM (
    SELECT 1 FROM conveyor_jobs_all AS j
    WHERE (:states IS NULL OR instr(:states, ',' || j.state || ',') > 0)
      AND (:queue IS NULL OR j.queue = :queue)
      AND (:task IS NULL OR j.task = :task)
      AND (:tag IS NULL OR EXISTS (SELECT 1 FROM json_each(j.tags) AS t WHERE t.value = :tag))
      AND (:args_paths IS NULL OR NOT EXISTS (SELECT 1 FROM json_each(:args_paths) AS p
           WHERE json_extract(j.kwargs, json_extract(p.value, '$[0]')) IS NOT json_extract(p.value, '$[1]')
              OR replace(replace(coalesce(json_type(j.kwargs, json_extract(p.value, '$[0]')), ''), 'integer', 'real'), 'true', 'false')
                 IS NOT json_extract(p.value, '$[2]')))
  AND (:args_paths IS NULL OR NOT EXISTS (SELECT 1 FROM json_each(:args_paths) AS p
       WHERE json_extract(j.kwargs, json_extract(p.value, '$[0]')) IS NOT json_extract(p.value, '$[1]')
          OR replace(replace(coalesce(json_type(j.kwargs, json_extract(p.value, '$[0]')), ''), 'integer', 'real'), 'true', 'false')
             IS NOT json_extract(p.value, '$[2]')))
      AND (:text IS NULL OR instr(lower(j.args || ' ' || j.kwargs), lower(:text)) > 0)
      AND (:error_key IS NULL OR substr(coalesce(json_extract(j.errors, '$[#-1].error'), ''), 1,
                      CASE WHEN instr(coalesce(json_extract(j.errors, '$[#-1].error'), ''), char(10)) BETWEEN 1 AND 201
                           THEN instr(coalesce(json_extract(j.errors, '$[#-1].error'), ''), char(10)) - 1 ELSE 200 END) = :error_key)
      AND (:ids IS NULL OR j.id IN (SELECT value FROM json_each(:ids)))
      AND j.id >= coalesce(:min_id, 0)
      AND j.id <= coalesce(:max_id, 9223372036854775807)
    LIMIT :cap
);

-- name: job_count_by_queue
-- Exact counts of the waiting and running states, the queues' depth.
SELECT queue, state, n FROM conveyor_queue_depth;

-- name: job_count_final_capped
SELECT 'completed' AS state, count(*) AS n
FROM (SELECT 1 FROM conveyor_jobs_all WHERE state = 'completed' AND state NOT IN ('available', 'running') LIMIT :cap)
UNION ALL
SELECT 'cancelled', count(*)
FROM (SELECT 1 FROM conveyor_jobs_all WHERE state = 'cancelled' AND state NOT IN ('available', 'running') LIMIT :cap)
UNION ALL
SELECT 'discarded', count(*)
FROM (SELECT 1 FROM conveyor_jobs_all WHERE state = 'discarded' AND state NOT IN ('available', 'running') LIMIT :cap);

-- name: job_count_final_by_queue
-- Exact counts of the final states per queue (`conveyor queues list`): one pass over
-- the cold state index, whose WHERE term is repeated for SQLite.
SELECT queue, state, count(*) AS n FROM conveyor_jobs_all
WHERE state IN ('completed', 'cancelled', 'discarded') AND state NOT IN ('available', 'running')
GROUP BY queue, state;

-- name: job_failure_groups
SELECT f.task, f.error,
       sum(f.state = 'retryable') AS retryable,
       sum(f.state = 'discarded') AS discarded,
       max(f.id) AS last_id,
       max(coalesce(f.finished_at, f.attempted_at, f.scheduled_at)) AS last_at
FROM (
    SELECT j.id, j.task, j.state, j.finished_at, j.attempted_at, j.scheduled_at,
           substr(coalesce(json_extract(j.errors, '$[#-1].error'), ''), 1,
                             CASE WHEN instr(coalesce(json_extract(j.errors, '$[#-1].error'), ''), char(10)) BETWEEN 1 AND 201
                                  THEN instr(coalesce(json_extract(j.errors, '$[#-1].error'), ''), char(10)) - 1 ELSE 200 END) AS error
    FROM conveyor_jobs_all AS j
    WHERE j.state IN ('retryable', 'discarded') AND j.state NOT IN ('available', 'running')
      AND (:queue IS NULL OR j.queue = :queue)
      AND (:task IS NULL OR j.task = :task)
    ORDER BY j.id DESC
    LIMIT :scan
) AS f
GROUP BY f.task, f.error
ORDER BY count(*) DESC, max(f.id) DESC
LIMIT :limit;

-- name: job_pick_matching
-- The first step of a bulk action, in its transaction: up to :limit jobs that match
-- the filter and are in one of the :allowed states (',a,b,'), oldest first.
SELECT j.id, j.task, j.queue, j.state, j.attempt FROM conveyor_jobs AS j
WHERE instr(:allowed, ',' || j.state || ',') > 0
  AND (:states IS NULL OR instr(:states, ',' || j.state || ',') > 0)
  AND (:queue IS NULL OR j.queue = :queue)
  AND (:task IS NULL OR j.task = :task)
  AND (:tag IS NULL OR EXISTS (SELECT 1 FROM json_each(j.tags) AS t WHERE t.value = :tag))
  AND (:args_paths IS NULL OR NOT EXISTS (SELECT 1 FROM json_each(:args_paths) AS p
       WHERE json_extract(j.kwargs, json_extract(p.value, '$[0]')) IS NOT json_extract(p.value, '$[1]')
          OR replace(replace(coalesce(json_type(j.kwargs, json_extract(p.value, '$[0]')), ''), 'integer', 'real'), 'true', 'false')
             IS NOT json_extract(p.value, '$[2]')))
  AND (:text IS NULL OR instr(lower(j.args || ' ' || j.kwargs), lower(:text)) > 0)
  AND (:error_key IS NULL OR substr(coalesce(json_extract(j.errors, '$[#-1].error'), ''), 1,
                  CASE WHEN instr(coalesce(json_extract(j.errors, '$[#-1].error'), ''), char(10)) BETWEEN 1 AND 201
                       THEN instr(coalesce(json_extract(j.errors, '$[#-1].error'), ''), char(10)) - 1 ELSE 200 END) = :error_key)
  AND (:ids IS NULL OR j.id IN (SELECT value FROM json_each(:ids)))
  AND j.id >= coalesce(:min_id, 0)
  AND j.id <= coalesce(:max_id, 9223372036854775807)
ORDER BY j.id
LIMIT :limit;

-- name: job_retry_ids
-- As job_retry, for many jobs (picked by job_pick_matching in the same transaction).
UPDATE conveyor_jobs
SET state = 'available',
    scheduled_at = (julianday('now') - 2440587.5) * 86400.0,
    finished_at = NULL,
    max_attempts = max(max_attempts, attempt + 1),
    cancel_requested = 0,
    expires_at = NULL
WHERE id IN (SELECT value FROM json_each(:ids))
  AND state IN ('scheduled', 'retryable', 'completed', 'cancelled', 'discarded')
RETURNING id;

-- name: job_discard_ids
-- Waiting jobs only: a running job is cancelled instead, through its worker.
UPDATE conveyor_jobs
SET state = 'discarded',
    finished_at = (julianday('now') - 2440587.5) * 86400.0,
    errors = json_insert(errors, '$[#]', json_set(json(:error),
                 '$.attempt', attempt,
                 '$.at', strftime('%Y-%m-%dT%H:%M:%fZ', 'now')))
WHERE id IN (SELECT value FROM json_each(:ids))
  AND state IN ('pending', 'scheduled', 'available', 'retryable')
RETURNING id;

-- name: job_count_running_by_node
SELECT lease_owner AS node, count(*) AS n FROM conveyor_jobs
WHERE state = 'running'
GROUP BY lease_owner;

-- name: schema_version
SELECT coalesce(max(version), 0) AS version FROM conveyor_migrations;

-- name: job_count_requiring
-- Waiting jobs that require worker labels, per queue and requirement (the dashboard);
-- read from the requirement index alone, which holds those jobs only.
SELECT queue, requires, count(*) AS n FROM conveyor_jobs
WHERE requires IS NOT NULL AND state IN ('pending', 'scheduled', 'available', 'retryable')
GROUP BY queue, requires
ORDER BY queue, n DESC
LIMIT :limit;
