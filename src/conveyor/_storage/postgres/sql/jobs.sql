-- Conveyor named queries, PostgreSQL dialect. Parameters use psycopg's named style.
-- "Now" is always the database clock: now(), the start of the current transaction.
-- Batches arrive as parallel arrays and are unnested, so a batch is one statement.
-- Statements that make jobs ready also NOTIFY the channel with each queue name, in the
-- same statement: the wake-up is sent on commit and never for a rolled-back write.
-- The "woken" CTE always yields exactly one row; joining it only forces the NOTIFYs to run.
-- Postgres sends one notification per distinct (channel, payload) per transaction.
-- Statements that make jobs final NOTIFY %(finished_channel)s once (payload ''), for
-- job.wait: the "finished" CTE notifies at most once per statement, whatever its size.

-- name: job_insert_rows
-- A fragment, not a statement (schema.FRAGMENTS): the columns and the unnested rows of a
-- batch insert, in request order; job_insert and job_replace_unique take it as
-- {job_insert_rows}.
(task, queue, args, kwargs, priority, max_attempts, tags, meta, state,
         scheduled_at, created_at, unique_key, unique_states, concurrency_key, requires,
         expires_at, fair_key)
    SELECT b.task, b.queue, b.args::jsonb, b.kwargs::jsonb, b.priority, b.max_attempts,
           b.tags::jsonb, b.meta::jsonb,
           CASE WHEN d.due > now() THEN 'scheduled' ELSE 'available' END, d.due, now(),
           b.unique_key, b.unique_states, b.concurrency_key, b.requires::jsonb,
           coalesce(b.expires_at, now() + b.expires_in * interval '1 second'),
           b.fair_key
    FROM unnest(%(task)b::text[], %(queue)b::text[], %(args)b::text[], %(kwargs)b::text[],
                %(priority)b::smallint[], %(max_attempts)b::integer[], %(tags)b::text[],
                %(meta)b::text[], %(delay)b::float8[], %(run_at)b::timestamptz[],
                %(unique_key)b::text[], %(unique_states)b::text[], %(concurrency_key)b::text[],
                %(requires)b::text[], %(expires_in)b::float8[], %(expires_at)b::timestamptz[],
                %(fair_key)b::text[])
         WITH ORDINALITY
         AS b(task, queue, args, kwargs, priority, max_attempts, tags, meta, delay, run_at,
              unique_key, unique_states, concurrency_key, requires, expires_in, expires_at,
              fair_key, ord)
    CROSS JOIN LATERAL (
        SELECT coalesce(b.run_at, now() + coalesce(b.delay, 0) * interval '1 second') AS due
    ) AS d
    ORDER BY b.ord

-- name: job_insert
-- Jobs with an expiry come this way too (the plain batch paths leave expires_at NULL).
WITH inserted AS (
    INSERT INTO conveyor_jobs
    {job_insert_rows}
    -- A live job already holds one of these unique keys: skip the row, keep the rest.
    ON CONFLICT DO NOTHING
    RETURNING *
), woken AS (
    SELECT count(pg_notify(%(channel)s, q.queue)) AS n
    FROM (SELECT DISTINCT queue FROM inserted) AS q
)
SELECT inserted.* FROM inserted CROSS JOIN woken
ORDER BY inserted.id;

-- name: job_replace_unique
-- Unique(on_conflict="replace") (debounce), for the jobs whose job_insert met a holder
-- of their key: one upsert. While the holder still waits it takes the job's arguments,
-- run time, concurrency key, fair key and expiry; if it has left the key's states meanwhile (a
-- claim started it: the states are the waiting ones), the job goes in as a new one.
-- PostgreSQL decides which atomically (a holder a claim has locked is waited for, then
-- the insert is tried again), so a racing claim never makes the enqueue fail. The caller
-- sends one job per key (a row cannot be upserted twice in one statement); duplicate
-- says which rows were replaced rather than inserted.
WITH replaced AS (
    INSERT INTO conveyor_jobs AS j
    {job_insert_rows}
    ON CONFLICT (unique_key)
        WHERE unique_key IS NOT NULL AND strpos(unique_states, ',' || state || ',') > 0
    DO UPDATE SET args = excluded.args,
                  kwargs = excluded.kwargs,
                  state = excluded.state,
                  scheduled_at = excluded.scheduled_at,
                  concurrency_key = excluded.concurrency_key,
                  expires_at = excluded.expires_at,
                  fair_key = excluded.fair_key
    WHERE j.state IN ('scheduled', 'available', 'retryable')
    RETURNING j.*, j.xmax <> 0 AS duplicate
), woken AS (
    SELECT count(pg_notify(%(channel)s, q.queue)) AS n
    FROM (SELECT DISTINCT queue FROM replaced WHERE state = 'available') AS q
)
SELECT replaced.* FROM replaced CROSS JOIN woken
ORDER BY replaced.id;

-- name: job_get_unique
SELECT * FROM conveyor_jobs
WHERE unique_key = ANY(%(unique_keys)b::text[])
  AND strpos(unique_states, ',' || state || ',') > 0;

-- name: job_claim_lease
-- A fragment (schema.FRAGMENTS): what every claim sets on the rows it takes, a new
-- attempt leased to %(owner)s for %(lease_ttl)s seconds under a new fence token.
SET state = 'running',
    attempt = j.attempt + 1,
    attempted_at = now(),
    lease_owner = %(owner)s::text,
    lease_token = 1 + floor(random() * 9.0e18)::bigint,
    lease_expires_at = now() + %(lease_ttl)s::float8 * interval '1 second'

-- name: job_claim_commit
-- A fragment (schema.FRAGMENTS): a FROM item of every claim, which lets the claim's own
-- transaction commit without waiting for its WAL to reach the disk (synchronous_commit
-- 'off' for that transaction only), saving each claim a flush (0.1-0.2 ms here), which
-- every job's enqueue-to-start waits for. Nothing is lost by it: a claim that a server
-- crash undoes is a lease that never was, and the job is available again and runs
-- again, as after an expired lease (at least once); the worker that held it is fenced
-- off. And any later durable commit (the job's ack, a heartbeat) flushes the WAL past
-- the claim first, so no outcome is ever durable without its claim. A database that
-- wants claims durable too (a synchronous standby that must never replay a job) sets
-- the custom setting conveyor.claim_commit to a synchronous_commit value ('on',
-- 'remote_apply', ...), e.g. ALTER DATABASE ... SET conveyor.claim_commit = 'on'.
(SELECT set_config('synchronous_commit',
                   coalesce(nullif(current_setting('conveyor.claim_commit', true), ''), 'off'),
                   true)) AS claim_commit

-- name: job_fetch_available
UPDATE conveyor_jobs AS j
{job_claim_lease}
FROM {job_claim_commit}, (
    SELECT id FROM conveyor_jobs
    WHERE state = 'available' AND queue = %(queue)s::text
      AND requires IS NULL  -- routed: job_claim_route (schema.routed_claims)
    ORDER BY priority DESC, scheduled_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) AS p
WHERE j.id = p.id
-- only what a worker's Job needs, JSON as text (rows.CLAIM_COLUMNS, by load_queries)
RETURNING {claim_columns};

-- name: job_claim_route
-- What a routed claim (a worker with labels or --tasks) takes instead of "requires IS
-- NULL": jobs whose every required label the worker has (%(labels)s, a JSON object), of
-- the tasks it serves (%(tasks)s; NULL: any).
AND (requires IS NULL OR requires <@ %(labels)s::jsonb)
AND (%(tasks)s::text[] IS NULL OR task = ANY(%(tasks)s::text[]))

-- name: job_ack
-- A fenced write: it applies only while this attempt still holds the lease.
-- A cancel requested while the job ran wins over a retry or a snooze.
WITH acked AS (
    UPDATE conveyor_jobs AS j
    SET state = CASE WHEN j.cancel_requested AND a.state IN ('available', 'scheduled', 'retryable')
                     THEN 'cancelled' ELSE a.state END,
        attempt = j.attempt + a.attempt_delta,
        scheduled_at = CASE WHEN a.delay IS NULL THEN j.scheduled_at
                            ELSE now() + a.delay * interval '1 second' END,
        finished_at = CASE WHEN a.state IN ('completed', 'cancelled', 'discarded')
                             OR (j.cancel_requested
                                 AND a.state IN ('available', 'scheduled', 'retryable'))
                           THEN now() END,
        result = a.result::jsonb,
        errors = CASE WHEN a.error IS NULL THEN j.errors
                      ELSE j.errors || jsonb_build_array(a.error::jsonb) END,
        ran_on = CASE WHEN a.run_time IS NULL THEN j.ran_on ELSE %(node)s::text END,
        run_time = coalesce(a.run_time, j.run_time),
        lease_owner = NULL,
        lease_token = NULL,
        lease_expires_at = NULL
    FROM unnest(%(id)b::bigint[], %(lease_token)b::bigint[], %(state)b::text[],
                %(delay)b::float8[], %(result)b::text[], %(error)b::text[],
                %(attempt_delta)b::integer[], %(run_time)b::float8[])
         AS a(id, lease_token, state, delay, result, error, attempt_delta, run_time)
    -- lease_token is non-null only while running (CHECK); testing state too would let the
    -- planner join through the state index on stale estimates (see job_ack_completed)
    WHERE j.id = a.id AND j.lease_token = a.lease_token
    RETURNING j.id, j.queue, j.state
), woken AS (
    SELECT count(pg_notify(%(channel)s, q.queue)) AS n
    FROM (SELECT DISTINCT queue FROM acked WHERE state = 'available') AS q
), finished AS (
    SELECT count(pg_notify(%(finished_channel)s, '')) AS n
    FROM (SELECT 1 FROM acked WHERE state IN ('completed', 'cancelled', 'discarded') LIMIT 1) AS f
)
SELECT acked.id, acked.queue, acked.state FROM acked CROSS JOIN woken CROSS JOIN finished;

-- name: job_heartbeat
UPDATE conveyor_jobs AS j
SET lease_expires_at = now() + %(lease_ttl)s::float8 * interval '1 second'
FROM unnest(%(id)b::bigint[], %(lease_token)b::bigint[]) AS l(id, lease_token)
-- lease_token is non-null only while running (CHECK): joined through the primary key
WHERE j.id = l.id AND j.lease_token = l.lease_token
RETURNING j.id, j.cancel_requested;

-- name: job_progress
-- Running attempts' coalesced progress in one statement; a worker that lost the lease
-- matches no row (lease_token is non-null only while running).
UPDATE conveyor_jobs AS j
SET progress = coalesce(p.progress, j.progress),
    progress_message = CASE WHEN p.progress IS NULL THEN j.progress_message
                            ELSE p.message END,
    meta = coalesce(p.meta::jsonb, j.meta),
    progress_at = now()
FROM unnest(%(id)b::bigint[], %(lease_token)b::bigint[], %(progress)b::float8[],
            %(message)b::text[], %(meta)b::text[])
     AS p(id, lease_token, progress, message, meta)
WHERE j.id = p.id AND j.lease_token = p.lease_token
RETURNING j.id;

-- name: job_rescue_expired
-- Rescuing counts the attempt, so a job that kills its worker every time ends discarded.
WITH rescued AS (
    UPDATE conveyor_jobs AS j
    SET state = CASE WHEN j.cancel_requested THEN 'cancelled'
                     WHEN j.attempt >= j.max_attempts THEN 'discarded'
                     ELSE 'available' END,
        finished_at = CASE WHEN j.cancel_requested OR j.attempt >= j.max_attempts
                           THEN now() END,
        scheduled_at = now(),
        errors = j.errors || jsonb_build_array(%(error)s::jsonb || jsonb_build_object(
                     'attempt', j.attempt,
                     'at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                     'node', j.lease_owner)),
        lease_owner = NULL,
        lease_token = NULL,
        lease_expires_at = NULL
    FROM (
        SELECT id FROM conveyor_jobs
        WHERE state = 'running'
          AND (lease_expires_at < now()
               -- its node stopped heartbeating: rescue before a long lease runs out
               -- (%(node_ttl)s overrides each node's own ttl when given)
               OR lease_owner IN (SELECT id FROM conveyor_nodes WHERE heartbeat_at
                                  < now() - coalesce(%(node_ttl)s::float8, ttl)
                                            * interval '1 second'))
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS e
    WHERE j.id = e.id
    RETURNING j.id, j.queue, j.state
), woken AS (
    SELECT count(pg_notify(%(channel)s, q.queue)) AS n
    FROM (SELECT DISTINCT queue FROM rescued WHERE state = 'available') AS q
), finished AS (
    SELECT count(pg_notify(%(finished_channel)s, '')) AS n
    FROM (SELECT 1 FROM rescued WHERE state IN ('completed', 'cancelled', 'discarded') LIMIT 1) AS f
)
SELECT rescued.id, rescued.queue FROM rescued CROSS JOIN woken CROSS JOIN finished;

-- name: job_stage_due
-- One previous state per call (scheduled, then retryable), so each row's transition is known.
WITH staged AS (
    UPDATE conveyor_jobs AS j
    SET state = 'available'
    FROM (
        SELECT id FROM conveyor_jobs
        -- the stage index's own predicate, so that the plan can always use it
        WHERE state IN ('scheduled', 'retryable') AND state = %(from_state)s
          AND scheduled_at <= now()
        ORDER BY scheduled_at
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS d
    WHERE j.id = d.id
    RETURNING j.id, j.task, j.queue, j.attempt
), woken AS (
    SELECT count(pg_notify(%(channel)s, q.queue)) AS n
    FROM (SELECT DISTINCT queue FROM staged) AS q
)
SELECT staged.* FROM staged CROSS JOIN woken;

-- name: job_get
SELECT * FROM conveyor_jobs_all WHERE id = %(id)s::bigint;

-- name: job_list
-- Filtered by task, the jobs not running come from the task index and the running ones
-- from the lease index (job_task_parts), merged by id.
SELECT * FROM conveyor_jobs_split AS j
WHERE (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR task = %(task)s::text) AND {job_task_parts}
  AND (%(before_id)s::bigint IS NULL OR id < %(before_id)s::bigint)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: job_retry
-- An operator's retry is meant to run the job: an expiry it had is lifted.
WITH retried AS (
    UPDATE conveyor_jobs
    SET state = 'available',
        scheduled_at = now(),
        finished_at = NULL,
        max_attempts = GREATEST(max_attempts, attempt + 1),
        cancel_requested = false,
        expires_at = NULL
    WHERE id = %(id)s::bigint
      AND state IN ('scheduled', 'retryable', 'completed', 'cancelled', 'discarded')
    RETURNING *
), woken AS (
    SELECT count(pg_notify(%(channel)s, queue)) AS n FROM retried
)
SELECT retried.* FROM retried CROSS JOIN woken;

-- name: job_cancel
-- A queued job is cancelled at once; a running one is flagged and its worker stops it.
WITH cancelled AS (
    UPDATE conveyor_jobs
    SET state = CASE WHEN state = 'running' THEN 'running' ELSE 'cancelled' END,
        finished_at = CASE WHEN state = 'running' THEN NULL ELSE now() END,
        cancel_requested = (state = 'running')
    WHERE id = %(id)s::bigint AND state IN ('pending', 'scheduled', 'available', 'retryable', 'running')
    RETURNING *
), finished AS (
    SELECT count(pg_notify(%(finished_channel)s, '')) AS n
    FROM (SELECT 1 FROM cancelled WHERE state = 'cancelled') AS f
)
SELECT cancelled.* FROM cancelled CROSS JOIN finished;

-- name: job_count_by_state
SELECT state, count(*) AS n FROM conveyor_jobs_all
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s::text)
GROUP BY state;

-- name: node_upsert
INSERT INTO conveyor_nodes (id, hostname, pid, queues, tasks, labels, version, started_at,
                            heartbeat_at, ttl, serves)
VALUES (%(id)s::text, %(hostname)s::text, %(pid)s::integer, %(queues)s::jsonb, %(tasks)s::jsonb,
        %(labels)s::jsonb, %(version)s::text, now(), now(), %(ttl)s::float8, %(serves)s::jsonb)
ON CONFLICT (id) DO UPDATE
SET queues = excluded.queues, tasks = excluded.tasks, heartbeat_at = excluded.heartbeat_at,
    ttl = excluded.ttl, labels = excluded.labels, version = excluded.version,
    serves = excluded.serves;

-- name: node_delete
DELETE FROM conveyor_nodes WHERE id = %(id)s::text;

