-- Edit and retry: a job's arguments replaced by an operator, the edit recorded, the job
-- retried, in one transaction (base.job_retry_edited runs them through _move).

-- name: job_edit_pick
-- The job, locked, if retry may take it from its state (as job_retry).
SELECT id FROM conveyor_jobs
WHERE id = %(id)s::bigint
  AND state IN ('scheduled', 'retryable', 'completed', 'cancelled', 'discarded')
FOR UPDATE;

-- name: job_edit_record
INSERT INTO conveyor_job_edits
    (job_id, source, actor, args_before, kwargs_before, args, kwargs)
SELECT id, %(source)s::text, %(actor)s::text, args, kwargs,
       %(args)s::jsonb, %(kwargs)s::jsonb
FROM conveyor_jobs WHERE id = ANY(%(ids)s::bigint[]);

-- name: job_edit_apply
UPDATE conveyor_jobs SET args = %(args)s::jsonb, kwargs = %(kwargs)s::jsonb
WHERE id = ANY(%(ids)s::bigint[]);

-- name: job_edit_list
SELECT at, source, actor, args_before::text AS args_before,
       kwargs_before::text AS kwargs_before, args::text AS args, kwargs::text AS kwargs
FROM conveyor_job_edits WHERE job_id = %(id)s::bigint ORDER BY id;

-- name: job_edit_prune
-- Edits of jobs that are gone (pruned, deleted, purged), a bounded batch. The edits
-- table is small (one row per operator edit) and read whole; each edit's job is looked
-- up by id (scalar subqueries: a probe of each table's id index, never a scan of history).
DELETE FROM conveyor_job_edits WHERE id IN (
    SELECT e.id FROM conveyor_job_edits AS e
    WHERE (SELECT count(*) FROM conveyor_jobs AS j WHERE j.id = e.job_id) = 0
      AND (SELECT count(*) FROM conveyor_jobs_history AS h WHERE h.id = e.job_id) = 0
    LIMIT %(limit)s)
RETURNING id;
