-- Workflows (job dependencies) and batches, PostgreSQL dialect. What happens when a job
-- becomes final (dependents released or cancelled, batch counters and callbacks) is the
-- settle trigger of migration 0010: it runs inside every final-state write.

-- name: workflow_lock_deps
-- The existing jobs a new job depends on, locked in id order and flagged: a dependency
-- finishing at the same time either committed first (its state is final here) or waits
-- for this transaction and then sees its followers (no lost wake-up).
UPDATE conveyor_jobs AS j SET followers = true
FROM (SELECT id FROM conveyor_jobs WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id FOR UPDATE) AS l
WHERE j.id = l.id
RETURNING j.id, j.state;

-- name: workflow_archived_deps
-- Dependencies no longer in the hot table: finished and archived (their state is final,
-- so nothing needs a lock; a retry brings a job back to the hot table first).
-- One id at a time (each partition's id index; = ANY lets tiny partitions be scanned).
SELECT h.id, h.state FROM unnest(%(ids)s::bigint[]) AS u(id)
CROSS JOIN LATERAL (SELECT id, state FROM conveyor_jobs_history WHERE id = u.id) AS h;

-- name: workflow_insert_jobs
WITH inserted AS (
    INSERT INTO conveyor_jobs
        (task, queue, args, kwargs, priority, max_attempts, tags, meta, state,
         scheduled_at, created_at, concurrency_key, workflow_id, batch_id, deps_pending,
         followers, results_arg, callback_batch_id, requires)
    SELECT b.task, b.queue, b.args::jsonb, b.kwargs::jsonb, b.priority, b.max_attempts,
           b.tags::jsonb, b.meta::jsonb,
           CASE WHEN b.deps_pending > 0 THEN 'pending'
                WHEN d.due > now() THEN 'scheduled' ELSE 'available' END, d.due, now(),
           b.concurrency_key, b.workflow_id, b.batch_id, b.deps_pending, b.followers,
           b.results_arg, b.callback_batch_id, b.requires::jsonb
    FROM unnest(%(task)s::text[], %(queue)s::text[], %(args)s::text[], %(kwargs)s::text[],
                %(priority)s::smallint[], %(max_attempts)s::integer[], %(tags)s::text[],
                %(meta)s::text[], %(delay)s::float8[], %(run_at)s::timestamptz[],
                %(concurrency_key)s::text[], %(workflow_id)s::text[], %(batch_id)s::bigint[],
                %(deps_pending)s::integer[], %(followers)s::boolean[],
                %(results_arg)s::text[], %(callback_batch_id)s::bigint[], %(requires)s::text[])
         WITH ORDINALITY
         AS b(task, queue, args, kwargs, priority, max_attempts, tags, meta, delay, run_at,
              concurrency_key, workflow_id, batch_id, deps_pending, followers, results_arg,
              callback_batch_id, requires, ord)
    CROSS JOIN LATERAL (
        SELECT coalesce(b.run_at, now() + coalesce(b.delay, 0) * interval '1 second') AS due
    ) AS d
    ORDER BY b.ord
    RETURNING id, queue, state
), woken AS (
    SELECT count(pg_notify(%(channel)s, q.queue)) AS n
    FROM (SELECT DISTINCT queue FROM inserted WHERE state = 'available') AS q
)
SELECT inserted.id FROM inserted CROSS JOIN woken ORDER BY inserted.id;

-- name: workflow_insert_deps
-- settled: the dependency was final already (it counted at insert).
INSERT INTO conveyor_job_deps (job_id, depends_on, on_failure, settled)
SELECT * FROM unnest(%(job_id)s::bigint[], %(depends_on)s::bigint[], %(on_failure)s::text[],
                     %(settled)s::boolean[])
ON CONFLICT DO NOTHING;

-- name: workflow_cancel
-- New jobs whose dependency was already discarded or cancelled under the "cancel" policy.
-- state || '': the rows are found by id whatever the statistics (see schema 14).
UPDATE conveyor_jobs SET state = 'cancelled', finished_at = now()
WHERE id = ANY(%(ids)s::bigint[]) AND state || '' = 'pending';

-- name: workflow_release_held
-- New jobs are inserted holding one extra count until their edges exist; dropping it
-- releases those whose dependencies were all final already (the release trigger).
-- state || '' as in workflow_cancel.
UPDATE conveyor_jobs SET deps_pending = deps_pending - 1
WHERE id = ANY(%(ids)s::bigint[]) AND state || '' = 'pending';

-- name: workflow_jobs_by_ids
SELECT * FROM conveyor_jobs_all WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id;

-- name: workflow_jobs
SELECT * FROM conveyor_jobs_all WHERE workflow_id = %(workflow_id)s::text ORDER BY id;

-- name: batch_jobs
-- A page of a batch's members in id order (the dashboard's batch page).
SELECT * FROM conveyor_jobs_all
WHERE batch_id = %(batch_id)s::bigint AND id > %(after_id)s::bigint
ORDER BY id LIMIT %(limit)s::bigint;

-- name: workflow_edges
-- The workflow's ids first (an init plan), so the edges are read by primary key ranges.
SELECT d.job_id, d.depends_on, d.on_failure
FROM conveyor_job_deps AS d
WHERE d.job_id = ANY(ARRAY(SELECT id FROM conveyor_jobs_all
                           WHERE workflow_id = %(workflow_id)s::text))
ORDER BY d.job_id, d.depends_on;

-- name: job_dependencies
-- A job's dependencies with what a handler or explain_job needs (a deleted one: no row);
-- each read by id from the hot table and from history (it may have been archived).
SELECT d.depends_on AS id, d.on_failure, x.task, x.state, x.result, x.errors
FROM conveyor_job_deps AS d LEFT JOIN (
    SELECT id, task, state, result, errors FROM conveyor_jobs WHERE id = ANY(ARRAY(SELECT depends_on FROM conveyor_job_deps WHERE job_id = %(id)s::bigint))
    UNION ALL
    SELECT id, task, state, result, errors FROM conveyor_jobs_history WHERE id = ANY(ARRAY(SELECT depends_on FROM conveyor_job_deps WHERE job_id = %(id)s::bigint))
) AS x ON x.id = d.depends_on
WHERE d.job_id = %(id)s::bigint
ORDER BY d.depends_on;

-- name: batch_insert
INSERT INTO conveyor_batches (meta) VALUES (%(meta)s::jsonb) RETURNING id;

-- name: batch_set_callbacks
UPDATE conveyor_batches
SET on_success = %(on_success)s::bigint, on_complete = %(on_complete)s::bigint,
    on_discard = %(on_discard)s::bigint
WHERE id = %(id)s::bigint;

-- name: batch_grow
-- Counts new members of an open batch (and closes it when asked): the row lock orders
-- it with the members' own completions.
UPDATE conveyor_batches SET total = total + %(n)s::integer, open = %(open)s::boolean
WHERE id = %(id)s::bigint AND open
RETURNING id;

-- name: batch_close
UPDATE conveyor_batches SET open = false WHERE id = %(id)s::bigint RETURNING *;

-- name: batch_get
SELECT * FROM conveyor_batches WHERE id = %(id)s::bigint;

-- name: job_callback_batch
-- The batch a pending callback waits for (explain_job).
SELECT callback_batch_id AS batch_id FROM conveyor_jobs_all WHERE id = %(id)s::bigint;
