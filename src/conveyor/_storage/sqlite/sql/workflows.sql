-- Workflows (job dependencies) and batches, SQLite dialect. What happens when a job
-- becomes final (dependents released or cancelled, batch counters and callbacks) is the
-- settle trigger of migration 0010: it runs inside every final-state write. Id lists
-- arrive as JSON text; multi-row inserts run once per row (one transaction).

-- name: workflow_lock_deps
-- The existing jobs a new job depends on, flagged (one writer: nothing to lock).
UPDATE conveyor_jobs SET followers = 1
WHERE id IN (SELECT value FROM json_each(:ids))
RETURNING id, state;

-- name: workflow_archived_deps
-- Dependencies no longer in the hot table: finished and archived (their state is final).
SELECT id, state FROM conveyor_jobs_history WHERE id IN (SELECT value FROM json_each(:ids));

-- name: workflow_insert_jobs
INSERT INTO conveyor_jobs
    (task, queue, args, kwargs, priority, max_attempts, tags, meta, state,
     scheduled_at, created_at, concurrency_key, workflow_id, batch_id, deps_pending,
     followers, results_arg, callback_batch_id, requires)
SELECT :task, :queue, :args, :kwargs, :priority, :max_attempts, :tags, :meta,
       CASE WHEN :deps_pending > 0 THEN 'pending'
            WHEN d.due > d.now THEN 'scheduled' ELSE 'available' END, d.due, d.now,
       :concurrency_key, :workflow_id, :batch_id, :deps_pending, :followers, :results_arg,
       :callback_batch_id, :requires
FROM (SELECT coalesce(:run_at, n.now + coalesce(:delay, 0)) AS due, n.now
      FROM (SELECT (julianday('now') - 2440587.5) * 86400.0 AS now) AS n) AS d
RETURNING id;

-- name: workflow_insert_deps
-- settled: the dependency was final already (it counted at insert).
INSERT OR IGNORE INTO conveyor_job_deps (job_id, depends_on, on_failure, settled)
VALUES (:job_id, :depends_on, :on_failure, :settled);

-- name: workflow_cancel
-- New jobs whose dependency was already discarded or cancelled under the "cancel" policy.
UPDATE conveyor_jobs SET state = 'cancelled',
    finished_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'pending';

-- name: workflow_release_held
-- New jobs are inserted holding one extra count until their edges exist; dropping it
-- releases those whose dependencies were all final already (the release trigger).
UPDATE conveyor_jobs SET deps_pending = deps_pending - 1
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'pending';

-- name: workflow_jobs_by_ids
SELECT * FROM conveyor_jobs_all WHERE id IN (SELECT value FROM json_each(:ids)) ORDER BY id;

-- name: workflow_jobs
SELECT * FROM conveyor_jobs_all WHERE workflow_id = :workflow_id ORDER BY id;

-- name: batch_jobs
-- A page of a batch's members in id order (the dashboard's batch page).
SELECT * FROM conveyor_jobs_all WHERE batch_id = :batch_id AND id > :after_id ORDER BY id LIMIT :limit;

-- name: workflow_edges
SELECT d.job_id, d.depends_on, d.on_failure
FROM conveyor_jobs_all AS j JOIN conveyor_job_deps AS d ON d.job_id = j.id
WHERE j.workflow_id = :workflow_id
ORDER BY d.job_id, d.depends_on;

-- name: job_dependencies
-- A job's dependencies with what a handler or explain_job needs (a deleted one: no row);
-- each read by id from the hot table and from history (it may have been archived).
SELECT d.depends_on AS id, d.on_failure, x.task, x.state, x.result, x.errors
FROM conveyor_job_deps AS d LEFT JOIN (
    SELECT id, task, state, result, errors FROM conveyor_jobs WHERE id IN (SELECT depends_on FROM conveyor_job_deps WHERE job_id = :id)
    UNION ALL
    SELECT id, task, state, result, errors FROM conveyor_jobs_history WHERE id IN (SELECT depends_on FROM conveyor_job_deps WHERE job_id = :id)
) AS x ON x.id = d.depends_on
WHERE d.job_id = :id
ORDER BY d.depends_on;

-- name: batch_insert
INSERT INTO conveyor_batches (meta) VALUES (:meta) RETURNING id;

-- name: batch_set_callbacks
UPDATE conveyor_batches
SET on_success = :on_success, on_complete = :on_complete, on_discard = :on_discard
WHERE id = :id;

-- name: batch_grow
-- Counts new members of an open batch (and closes it when asked).
UPDATE conveyor_batches SET total = total + :n, open = :open
WHERE id = :id AND open = 1
RETURNING id;

-- name: batch_close
UPDATE conveyor_batches SET open = 0 WHERE id = :id RETURNING *;

-- name: batch_get
SELECT * FROM conveyor_batches WHERE id = :id;

-- name: job_callback_batch
-- The batch a pending callback waits for (explain_job).
SELECT callback_batch_id AS batch_id FROM conveyor_jobs_all WHERE id = :id;
