-- Conveyor named queries, SQLite dialect. Parameters use :name style.
-- "Now" is always the database clock: (julianday('now') - 2440587.5) * 86400.0 in unix seconds.

-- name: job_insert
-- A live job already holding the unique key makes this insert do nothing.
-- Jobs with an expiry come this way too (the plain batch paths leave expires_at NULL).
INSERT INTO conveyor_jobs
    (task, queue, args, kwargs, priority, max_attempts, tags, meta, state, scheduled_at, created_at,
     unique_key, unique_states, concurrency_key, requires, expires_at,
     fair_key)
SELECT :task, :queue, :args, :kwargs, :priority, :max_attempts, :tags, :meta,
       CASE WHEN due > now THEN 'scheduled' ELSE 'available' END, due, now,
       :unique_key, :unique_states, :concurrency_key, :requires,
       coalesce(:expires_at, now + :expires_in), :fair_key
FROM (SELECT coalesce(:run_at, now + coalesce(:delay, 0.0)) AS due, now
      FROM (SELECT (julianday('now') - 2440587.5) * 86400.0 AS now))
WHERE true
ON CONFLICT DO NOTHING
RETURNING *;

-- name: job_replace_unique
-- Unique(on_conflict="replace") (debounce), one key per call (the caller loops inside
-- its transaction, right after job_insert met the holder: one writer, so the holder is
-- still there): the holder takes this job's arguments, run time, concurrency key, fair
-- key and expiry. (PostgreSQL's statement is an upsert: a claim may start the holder between
-- its statements.)
UPDATE conveyor_jobs
SET args = :args,
    kwargs = :kwargs,
    state = CASE WHEN coalesce(:run_at, (julianday('now') - 2440587.5) * 86400.0
                                        + coalesce(:delay, 0.0))
                      > (julianday('now') - 2440587.5) * 86400.0
                 THEN 'scheduled' ELSE 'available' END,
    scheduled_at = coalesce(:run_at, (julianday('now') - 2440587.5) * 86400.0
                                     + coalesce(:delay, 0.0)),
    concurrency_key = :concurrency_key,
    expires_at = coalesce(:expires_at, (julianday('now') - 2440587.5) * 86400.0 + :expires_in),
    fair_key = :fair_key
WHERE unique_key = :unique_key
  AND state IN ('scheduled', 'available', 'retryable')
  AND instr(unique_states, ',' || state || ',') > 0
RETURNING *, 1 AS duplicate;

-- name: job_get_unique
-- One key per call on SQLite (the caller loops inside its transaction).
SELECT * FROM conveyor_jobs
WHERE unique_key = :unique_key
  AND instr(unique_states, ',' || state || ',') > 0;

-- name: job_fetch_available
UPDATE conveyor_jobs
SET state = 'running',
    attempt = attempt + 1,
    attempted_at = (julianday('now') - 2440587.5) * 86400.0,
    lease_owner = :owner,
    lease_token = random() & 9223372036854775807,
    lease_expires_at = (julianday('now') - 2440587.5) * 86400.0 + :lease_ttl
WHERE id IN (
    SELECT id FROM conveyor_jobs
    WHERE state = 'available' AND queue = :queue
      AND requires IS NULL  -- routed: job_claim_route (schema.routed_claims)
    ORDER BY priority DESC, scheduled_at, id
    LIMIT :limit
)
-- only what a worker's Job needs (rows.CLAIM_COLUMNS, filled in by load_queries)
RETURNING {claim_columns};

-- name: job_claim_route
-- What a routed claim (a worker with labels or --tasks) takes instead of "requires IS
-- NULL": jobs whose every required label the worker has (:labels, a JSON object), of
-- the tasks it serves (:tasks, a JSON array; NULL: any).
AND (requires IS NULL OR NOT EXISTS (
        SELECT 1 FROM json_each(conveyor_jobs.requires) AS r
        WHERE r.value IS NOT (SELECT l.value FROM json_each(:labels) AS l WHERE l.key = r.key)))
AND (:tasks IS NULL OR task IN (SELECT value FROM json_each(:tasks)))

-- name: job_ack
-- A fenced write: it applies only while this attempt still holds the lease.
-- A cancel requested while the job ran wins over a retry or a snooze.
UPDATE conveyor_jobs
SET state = CASE WHEN cancel_requested = 1 AND :state IN ('available', 'scheduled', 'retryable')
                 THEN 'cancelled' ELSE :state END,
    attempt = attempt + :attempt_delta,
    scheduled_at = CASE WHEN :delay IS NULL THEN scheduled_at
                        ELSE (julianday('now') - 2440587.5) * 86400.0 + :delay END,
    finished_at = CASE WHEN :state IN ('completed', 'cancelled', 'discarded')
                         OR (cancel_requested = 1 AND :state IN ('available', 'scheduled', 'retryable'))
                       THEN (julianday('now') - 2440587.5) * 86400.0 END,
    result = :result,
    errors = CASE WHEN :error IS NULL THEN errors
                  ELSE json_insert(errors, '$[#]', json(:error)) END,
    ran_on = CASE WHEN :run_time IS NULL THEN ran_on ELSE :node END,
    run_time = coalesce(:run_time, run_time),
    lease_owner = NULL,
    lease_token = NULL,
    lease_expires_at = NULL
WHERE id = :id AND lease_token = :lease_token AND state = 'running'
RETURNING id, queue, state;

-- name: job_heartbeat
UPDATE conveyor_jobs
SET lease_expires_at = (julianday('now') - 2440587.5) * 86400.0 + :lease_ttl
WHERE id = :id AND lease_token = :lease_token AND state = 'running'
RETURNING id, cancel_requested;

-- name: job_progress
-- A running attempt's coalesced progress; a worker that lost the lease matches no row.
UPDATE conveyor_jobs
SET progress = coalesce(:progress, progress),
    progress_message = CASE WHEN :progress IS NULL THEN progress_message ELSE :message END,
    meta = coalesce(:meta, meta),
    progress_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id = :id AND lease_token = :lease_token AND state = 'running'
RETURNING id;

-- name: job_rescue_expired
-- Rescuing counts the attempt, so a job that kills its worker every time ends discarded.
UPDATE conveyor_jobs
SET state = CASE WHEN cancel_requested = 1 THEN 'cancelled'
                 WHEN attempt >= max_attempts THEN 'discarded'
                 ELSE 'available' END,
    finished_at = CASE WHEN cancel_requested = 1 OR attempt >= max_attempts
                       THEN (julianday('now') - 2440587.5) * 86400.0 END,
    scheduled_at = (julianday('now') - 2440587.5) * 86400.0,
    errors = json_insert(errors, '$[#]', json_set(json(:error),
                 '$.attempt', attempt,
                 '$.at', strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
                 '$.node', lease_owner)),
    lease_owner = NULL,
    lease_token = NULL,
    lease_expires_at = NULL
WHERE id IN (
    SELECT id FROM conveyor_jobs
    WHERE state = 'running'
      AND (lease_expires_at < (julianday('now') - 2440587.5) * 86400.0
           -- its node stopped heartbeating: rescue before a long lease runs out
           -- (:node_ttl overrides each node's own ttl when given)
           OR lease_owner IN (SELECT id FROM conveyor_nodes WHERE heartbeat_at
                              < (julianday('now') - 2440587.5) * 86400.0
                                - coalesce(:node_ttl, ttl)))
    LIMIT :limit
)
RETURNING id, queue;

-- name: job_stage_due
-- One previous state per call (scheduled, then retryable), so each row's transition is known.
UPDATE conveyor_jobs
SET state = 'available'
WHERE id IN (
    SELECT id FROM conveyor_jobs
    -- the stage index's own predicate: SQLite uses a partial index only when the query
    -- repeats it (else this scans the whole table, backlog included)
    WHERE state IN ('scheduled', 'retryable') AND state = :from_state
      AND scheduled_at <= (julianday('now') - 2440587.5) * 86400.0
    ORDER BY scheduled_at
    LIMIT :limit
)
RETURNING id, task, queue, attempt;

-- name: job_get
SELECT * FROM conveyor_jobs_all WHERE id = :id;

-- name: job_list
SELECT * FROM conveyor_jobs_all
WHERE (:state IS NULL OR state = :state)
  AND (:queue IS NULL OR queue = :queue)
  AND (:task IS NULL OR task = :task)
  AND (:before_id IS NULL OR id < :before_id)
ORDER BY id DESC
LIMIT :limit;

-- name: job_retry
-- An operator's retry is meant to run the job: an expiry it had is lifted.
UPDATE conveyor_jobs
SET state = 'available',
    scheduled_at = (julianday('now') - 2440587.5) * 86400.0,
    finished_at = NULL,
    max_attempts = max(max_attempts, attempt + 1),
    cancel_requested = 0,
    expires_at = NULL
WHERE id = :id AND state IN ('scheduled', 'retryable', 'completed', 'cancelled', 'discarded')
RETURNING *;

-- name: job_cancel
-- A queued job is cancelled at once; a running one is flagged and its worker stops it.
UPDATE conveyor_jobs
SET state = CASE WHEN state = 'running' THEN 'running' ELSE 'cancelled' END,
    finished_at = CASE WHEN state = 'running' THEN NULL
                       ELSE (julianday('now') - 2440587.5) * 86400.0 END,
    cancel_requested = CASE WHEN state = 'running' THEN 1 ELSE 0 END
WHERE id = :id AND state IN ('pending', 'scheduled', 'available', 'retryable', 'running')
RETURNING *;

-- name: job_count_by_state
SELECT state, count(*) AS n FROM conveyor_jobs_all
WHERE (:queue IS NULL OR queue = :queue)
GROUP BY state;

-- name: node_upsert
INSERT INTO conveyor_nodes (id, hostname, pid, queues, tasks, labels, version, started_at,
                            heartbeat_at, ttl, serves)
VALUES (:id, :hostname, :pid, :queues, :tasks, :labels, :version,
        (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0,
        :ttl, :serves)
ON CONFLICT (id) DO UPDATE
SET queues = excluded.queues, tasks = excluded.tasks, heartbeat_at = excluded.heartbeat_at,
    ttl = excluded.ttl, labels = excluded.labels, version = excluded.version,
    serves = excluded.serves;

-- name: node_delete
DELETE FROM conveyor_nodes WHERE id = :id;

