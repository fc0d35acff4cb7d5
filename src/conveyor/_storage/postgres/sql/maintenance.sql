-- One-off maintenance (`conveyor prune`, `rescue`, `jobs delete`, `jobs purge`),
-- PostgreSQL dialect. A purge's filter: a job's age is that of its finish (never
-- finished: its creation), and running jobs never match. Batches walk ids upwards from
-- after_id to max_id, so a purge reads the table once, whatever it deletes.

-- name: job_delete
-- One job, whatever its state; a running one only with force (its worker's outcome
-- then matches no row, and its next heartbeat stops the handler).
DELETE FROM conveyor_jobs
WHERE id = %(id)s::bigint AND (state <> 'running' OR %(force)s::boolean)
RETURNING *;

-- name: job_purge_count
SELECT state, count(*) AS n, max(id) AS max_id FROM conveyor_jobs_all
WHERE state = ANY(%(states)s::text[]) AND state <> 'running'
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
  AND (%(older_than)s::float8 IS NULL OR coalesce(finished_at, created_at)
       < now() - %(older_than)s::float8 * interval '1 second')
  AND id > %(after_id)s::bigint AND id <= coalesce(%(max_id)s::bigint, 9223372036854775807)
GROUP BY state;

-- name: job_purge_pick
-- The next batch's candidates, read without locking anything.
SELECT id FROM conveyor_jobs_all
WHERE state = ANY(%(states)s::text[]) AND state <> 'running'
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
  AND (%(older_than)s::float8 IS NULL OR coalesce(finished_at, created_at)
       < now() - %(older_than)s::float8 * interval '1 second')
  AND id > %(after_id)s::bigint AND id <= coalesce(%(max_id)s::bigint, 9223372036854775807)
ORDER BY id
LIMIT %(limit)s;

-- name: job_purge_ids
-- Deletes the picked jobs that still match: a row claimed or retried since is checked
-- again on its new version (READ COMMITTED) and left alone.
DELETE FROM conveyor_jobs
WHERE id = ANY(%(ids)s::bigint[])
  AND state = ANY(%(states)s::text[]) AND state <> 'running'
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
  AND (%(older_than)s::float8 IS NULL OR coalesce(finished_at, created_at)
       < now() - %(older_than)s::float8 * interval '1 second')
RETURNING id, task, queue, state, attempt;

-- name: job_queue_pick
-- The next batch of one queue's jobs to delete, whatever their state, by id upwards.
SELECT id FROM conveyor_jobs_all
WHERE queue = %(queue)s::text AND id > %(after_id)s::bigint
ORDER BY id
LIMIT %(limit)s;

-- name: job_queue_delete_ids
-- Deletes the picked jobs of the queue from the hot table (history: job_history_delete);
-- a running one's worker then finds no row for its outcome.
DELETE FROM conveyor_jobs
WHERE id = ANY(%(ids)s::bigint[]) AND queue = %(queue)s::text
RETURNING id, task, queue, state, attempt;

-- name: job_prune_count
-- What job_prune would delete now, all batches together (`conveyor prune --dry-run`).
-- The same filter as job_prune, queue and exclude included.
SELECT count(*) AS n FROM conveyor_jobs_all AS j
WHERE ((state IN ('completed', 'cancelled')
        AND finished_at < now() - %(completed_age)s::float8 * interval '1 second')
    OR (state = 'discarded'
        AND finished_at < now() - %(discarded_age)s::float8 * interval '1 second'))
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(queue)s::text IS NOT NULL
       OR queue <> ALL(ARRAY(SELECT jsonb_array_elements_text(%(exclude)s::jsonb))))
  AND (NOT j.followers OR NOT EXISTS (  -- waiting dependents, by id (schema 14)
      SELECT 1 FROM conveyor_jobs AS w
      WHERE w.id = ANY(ARRAY(SELECT d.job_id FROM conveyor_job_deps AS d
                             WHERE d.depends_on = j.id))
        AND w.state || '' = 'pending'));

-- name: job_rescue_candidates
-- The jobs job_rescue_expired would rescue now (`conveyor rescue --dry-run`).
SELECT * FROM conveyor_jobs
WHERE state = 'running'
  AND (lease_expires_at < now()
       OR lease_owner IN (SELECT id FROM conveyor_nodes WHERE heartbeat_at
                          < now() - coalesce(%(node_ttl)s::float8, ttl)
                                    * interval '1 second'))
LIMIT %(limit)s;

-- name: table_dead_rows
-- Conveyor's tables in this schema with dead row versions, as the statistics last saw
-- them (history aside: retention drops its partitions whole), and whether this role
-- may VACUUM them (it owns them, or belongs to the role that does).
SELECT s.relname AS name, s.n_dead_tup AS dead, s.n_live_tup AS live,
       pg_has_role(c.relowner, 'USAGE') AS owned
FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
WHERE s.schemaname = current_schema() AND s.n_dead_tup > 0
  AND s.relname LIKE 'conveyor\_%%' AND s.relname NOT LIKE 'conveyor\_jobs\_history%%'
ORDER BY s.n_dead_tup DESC, s.relname;

-- name: job_expire_pick
-- The expirer (runtime/expirer.py): waiting jobs whose expires_at has passed, oldest
-- expiry first, through the partial index that holds only jobs with an expiry. A job a
-- claim holds is skipped: its worker's admission sees the expiry.
SELECT id, task, queue, state, attempt FROM conveyor_jobs
WHERE expires_at IS NOT NULL AND expires_at <= now()
  AND state IN ('pending', 'scheduled', 'available', 'retryable')
ORDER BY expires_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: job_expire_ids
-- The picked jobs (locked above, in this transaction) end cancelled with the reason
-- "expired"; job.wait is told once.
WITH expired AS (
    UPDATE conveyor_jobs
    SET state = 'cancelled',
        finished_at = now(),
        errors = errors || jsonb_build_array(%(error)s::jsonb || jsonb_build_object(
                     'attempt', attempt,
                     'at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))
    WHERE id = ANY(%(ids)s::bigint[]) AND state IN ('pending', 'scheduled', 'available', 'retryable')
    RETURNING id
), finished AS (
    SELECT count(pg_notify(%(finished_channel)s, '')) AS n
    FROM (SELECT 1 FROM expired LIMIT 1) AS f
)
SELECT expired.id FROM expired CROSS JOIN finished;
