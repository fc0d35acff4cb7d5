-- One-off maintenance (`conveyor prune`, `rescue`, `jobs delete`, `jobs purge`), SQLite
-- dialect. A purge's filter: :states is comma-wrapped (',a,b,'), a job's age is that of
-- its finish (never finished: its creation), and running jobs never match. Batches walk
-- ids upwards from :after_id to :max_id, so a purge reads the table once, whatever it
-- deletes.

-- name: job_delete
-- One job, whatever its state; a running one only with :force (its worker's outcome
-- then matches no row, and its next heartbeat stops the handler).
DELETE FROM conveyor_jobs
WHERE id = :id AND (state <> 'running' OR :force = 1)
RETURNING *;

-- name: job_purge_count
SELECT state, count(*) AS n, max(id) AS max_id FROM conveyor_jobs_all
WHERE instr(:states, ',' || state || ',') > 0 AND state <> 'running'
  AND (:queue IS NULL OR queue = :queue)
  AND (:task IS NULL OR task = :task)
  AND (:older_than IS NULL OR coalesce(finished_at, created_at)
       < (julianday('now') - 2440587.5) * 86400.0 - :older_than)
  AND id > :after_id AND id <= coalesce(:max_id, 9223372036854775807)
GROUP BY state;

-- name: job_purge_pick
-- The next batch's candidates, read outside any write transaction.
SELECT id FROM conveyor_jobs_all
WHERE instr(:states, ',' || state || ',') > 0 AND state <> 'running'
  AND (:queue IS NULL OR queue = :queue)
  AND (:task IS NULL OR task = :task)
  AND (:older_than IS NULL OR coalesce(finished_at, created_at)
       < (julianday('now') - 2440587.5) * 86400.0 - :older_than)
  AND id > :after_id AND id <= coalesce(:max_id, 9223372036854775807)
ORDER BY id
LIMIT :limit;

-- name: job_purge_ids
-- Deletes the picked jobs that still match (one may have been claimed or retried since).
DELETE FROM conveyor_jobs
WHERE id IN (SELECT value FROM json_each(:ids))
  AND instr(:states, ',' || state || ',') > 0 AND state <> 'running'
  AND (:queue IS NULL OR queue = :queue)
  AND (:task IS NULL OR task = :task)
  AND (:older_than IS NULL OR coalesce(finished_at, created_at)
       < (julianday('now') - 2440587.5) * 86400.0 - :older_than)
RETURNING id, task, queue, state, attempt;

-- name: job_queue_pick
-- The next batch of one queue's jobs to delete, whatever their state, by id upwards.
SELECT id FROM conveyor_jobs_all
WHERE queue = :queue AND id > :after_id
ORDER BY id
LIMIT :limit;

-- name: job_queue_delete_ids
-- Deletes the picked jobs of the queue from the hot table (history: job_history_delete);
-- a running one's worker then finds no row for its outcome.
DELETE FROM conveyor_jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND queue = :queue
RETURNING id, task, queue, state, attempt;

-- name: job_prune_count
-- What job_prune would delete now, all batches together (`conveyor prune --dry-run`).
-- The same filter as job_prune, queue and exclude included.
SELECT count(*) AS n FROM conveyor_jobs_all AS j
WHERE ((state IN ('completed', 'cancelled')
        AND finished_at < (julianday('now') - 2440587.5) * 86400.0 - :completed_age)
    OR (state = 'discarded'
        AND finished_at < (julianday('now') - 2440587.5) * 86400.0 - :discarded_age))
  AND (:queue IS NULL OR queue = :queue)
  AND (:queue IS NOT NULL OR queue NOT IN (SELECT value FROM json_each(:exclude)))
  AND (j.followers = 0 OR NOT EXISTS (
      SELECT 1 FROM conveyor_job_deps AS d JOIN conveyor_jobs AS w ON w.id = d.job_id
      WHERE d.depends_on = j.id AND w.state = 'pending'));

-- name: job_rescue_candidates
-- The jobs job_rescue_expired would rescue now (`conveyor rescue --dry-run`).
SELECT * FROM conveyor_jobs
WHERE state = 'running'
  AND (lease_expires_at < (julianday('now') - 2440587.5) * 86400.0
       OR lease_owner IN (SELECT id FROM conveyor_nodes WHERE heartbeat_at
                          < (julianday('now') - 2440587.5) * 86400.0
                            - coalesce(:node_ttl, ttl)))
LIMIT :limit;

-- name: table_dead_rows
-- None, ever: SQLite keeps no dead row versions (a deleted row's space is reused within
-- the file at once), so the vacuum service never has anything to do here.
SELECT '' AS name, 0 AS dead, 0 AS live, 0 AS owned WHERE 0;

-- name: job_expire_pick
-- The expirer (runtime/expirer.py): waiting jobs whose expires_at has passed, oldest
-- expiry first, through the partial index that holds only jobs with an expiry.
SELECT id, task, queue, state, attempt FROM conveyor_jobs
WHERE expires_at IS NOT NULL AND expires_at <= (julianday('now') - 2440587.5) * 86400.0
  AND state IN ('pending', 'scheduled', 'available', 'retryable')
ORDER BY expires_at
LIMIT :limit;

-- name: job_expire_ids
-- The picked jobs end cancelled with the reason "expired"; one claimed in between is
-- left to its worker's admission (same transaction here: none is).
UPDATE conveyor_jobs
SET state = 'cancelled',
    finished_at = (julianday('now') - 2440587.5) * 86400.0,
    errors = json_insert(errors, '$[#]', json_set(json(:error),
                 '$.attempt', attempt,
                 '$.at', strftime('%Y-%m-%dT%H:%M:%fZ', 'now')))
WHERE id IN (SELECT value FROM json_each(:ids))
  AND state IN ('pending', 'scheduled', 'available', 'retryable')
RETURNING id;
