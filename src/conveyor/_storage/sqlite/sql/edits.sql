-- Edit and retry: a job's arguments replaced by an operator, the edit recorded, the job
-- retried, in one transaction (base.job_retry_edited runs them through _move).

-- name: job_edit_pick
-- The job, if retry may take it from its state (as job_retry); the write transaction
-- holds the database's write lock.
SELECT id FROM conveyor_jobs
WHERE id = :id AND state IN ('scheduled', 'retryable', 'completed', 'cancelled', 'discarded');

-- name: job_edit_record
INSERT INTO conveyor_job_edits
    (job_id, at, source, actor, args_before, kwargs_before, args, kwargs)
SELECT id, (julianday('now') - 2440587.5) * 86400.0, :source, :actor, args, kwargs,
       :args, :kwargs
FROM conveyor_jobs WHERE id IN (SELECT value FROM json_each(:ids));

-- name: job_edit_apply
UPDATE conveyor_jobs SET args = :args, kwargs = :kwargs
WHERE id IN (SELECT value FROM json_each(:ids));

-- name: job_edit_list
SELECT at, source, actor, args_before, kwargs_before, args, kwargs
FROM conveyor_job_edits WHERE job_id = :id ORDER BY id;

-- name: job_edit_prune
-- Edits of jobs that are gone (pruned, deleted, purged), a bounded batch. The edits
-- table is small (one row per operator edit) and read whole; each edit's job is looked
-- up by id (scalar subqueries: a probe of each table's id index, never a scan of history).
DELETE FROM conveyor_job_edits WHERE id IN (
    SELECT e.id FROM conveyor_job_edits AS e
    WHERE (SELECT count(*) FROM conveyor_jobs AS j WHERE j.id = e.job_id) = 0
      AND (SELECT count(*) FROM conveyor_jobs_history AS h WHERE h.id = e.job_id) = 0
    LIMIT :limit)
RETURNING id;
