-- Cluster control, PostgreSQL dialect: queues, nodes, leadership, schedules, limits, pruning.

-- name: clock_now
SELECT now() AS now;

-- name: queue_list
SELECT * FROM conveyor_queues ORDER BY name;

-- name: queue_update
-- Upsert one queue's settings; each set_* flag says whether that column changes.
INSERT INTO conveyor_queues (name, paused, concurrency, scope, rate_limit, backoff,
                             completed_retention, discarded_retention, updated_at)
VALUES (%(name)s, coalesce(%(paused)s::boolean, false), %(concurrency)s::integer,
        coalesce(%(scope)s::text, 'split'), %(rate_limit)s::text, %(backoff)s::text,
        %(completed_retention)s::float8, %(discarded_retention)s::float8, now())
ON CONFLICT (name) DO UPDATE SET
    paused = CASE WHEN %(set_paused)s THEN excluded.paused ELSE conveyor_queues.paused END,
    concurrency = CASE WHEN %(set_concurrency)s THEN excluded.concurrency
                       ELSE conveyor_queues.concurrency END,
    scope = CASE WHEN %(set_concurrency)s THEN excluded.scope ELSE conveyor_queues.scope END,
    rate_limit = CASE WHEN %(set_rate_limit)s THEN excluded.rate_limit
                      ELSE conveyor_queues.rate_limit END,
    backoff = CASE WHEN %(set_backoff)s THEN excluded.backoff ELSE conveyor_queues.backoff END,
    completed_retention = CASE WHEN %(set_completed_retention)s
                               THEN excluded.completed_retention
                               ELSE conveyor_queues.completed_retention END,
    discarded_retention = CASE WHEN %(set_discarded_retention)s
                               THEN excluded.discarded_retention
                               ELSE conveyor_queues.discarded_retention END,
    updated_at = now();

-- name: node_list
-- Alive while the last heartbeat is younger than the node's own ttl (live_within
-- overrides it when given).
SELECT *, heartbeat_at >= now() - coalesce(%(live_within)s::float8, ttl) * interval '1 second'
       AS alive
FROM conveyor_nodes ORDER BY id;

-- name: leader_elect
-- Take the role if it is free or expired, or renew it if held; the term grows on change.
INSERT INTO conveyor_leader AS l (name, node_id, term, elected_at, expires_at)
VALUES (%(name)s, %(node_id)s, 1, now(), now() + %(ttl)s::float8 * interval '1 second')
ON CONFLICT (name) DO UPDATE SET
    term = CASE WHEN l.node_id = excluded.node_id THEN l.term ELSE l.term + 1 END,
    elected_at = CASE WHEN l.node_id = excluded.node_id THEN l.elected_at ELSE now() END,
    node_id = excluded.node_id,
    expires_at = excluded.expires_at
WHERE l.node_id = excluded.node_id OR l.expires_at < now();

-- name: leader_get
SELECT * FROM conveyor_leader WHERE name = %(name)s;

-- name: leader_resign
DELETE FROM conveyor_leader WHERE name = %(name)s AND node_id = %(node_id)s;

-- name: schedule_upsert
-- Code-defined schedules are re-declared by every worker: keep paused and last_tick.
INSERT INTO conveyor_schedules AS s
    (name, task, cron, timezone, args, kwargs, queue, priority, misfire, backfill)
VALUES (%(name)s, %(task)s, %(cron)s, %(timezone)s, %(args)s::jsonb, %(kwargs)s::jsonb,
        %(queue)s, %(priority)s, %(misfire)s, %(backfill)s)
ON CONFLICT (name) DO UPDATE SET
    task = excluded.task, cron = excluded.cron, timezone = excluded.timezone,
    args = excluded.args, kwargs = excluded.kwargs, queue = excluded.queue,
    priority = excluded.priority, misfire = excluded.misfire, backfill = excluded.backfill,
    updated_at = now()
WHERE (s.task, s.cron, s.timezone, s.args, s.kwargs, s.queue, s.priority, s.misfire, s.backfill)
      IS DISTINCT FROM (excluded.task, excluded.cron, excluded.timezone, excluded.args,
                        excluded.kwargs, excluded.queue, excluded.priority, excluded.misfire,
                        excluded.backfill);

-- name: schedule_list
SELECT * FROM conveyor_schedules ORDER BY name;

-- name: schedule_set_paused
UPDATE conveyor_schedules SET paused = %(paused)s, updated_at = now()
WHERE name = %(name)s
RETURNING name;

-- name: schedule_advance
-- last_tick only moves forward, whoever writes it.
UPDATE conveyor_schedules
SET last_tick = %(tick)s, last_job_id = coalesce(%(job_id)s, last_job_id)
WHERE name = %(name)s AND (last_tick IS NULL OR last_tick < %(tick)s);

-- name: schedule_delete
DELETE FROM conveyor_schedules WHERE name = %(name)s RETURNING name;

-- name: rate_limit_get
SELECT extract(epoch FROM tat)::float8 AS tat FROM conveyor_rate_limits WHERE key = %(key)s;

-- name: rate_limit_set
INSERT INTO conveyor_rate_limits (key, tat) VALUES (%(key)s, to_timestamp(%(tat)s))
ON CONFLICT (key) DO UPDATE SET tat = excluded.tat;

-- name: concurrency_count
SELECT count(*) AS n FROM conveyor_jobs
WHERE concurrency_key = %(key)s AND state = 'running' AND holds_slot;

-- name: concurrency_grant
UPDATE conveyor_jobs SET holds_slot = true
WHERE id = %(id)s AND lease_token = %(lease_token)s AND state = 'running'
RETURNING id;

-- name: concurrency_holders
SELECT id FROM conveyor_jobs
WHERE concurrency_key = %(key)s AND state = 'running' AND holds_slot
ORDER BY id LIMIT 20;

-- name: job_count_ahead
-- Available jobs of the same queue that a producer claims before this one.
SELECT count(*) AS n FROM conveyor_jobs AS o, conveyor_jobs AS j
WHERE j.id = %(id)s AND o.state = 'available' AND o.queue = j.queue AND o.id <> j.id
  AND (o.priority, -extract(epoch FROM o.scheduled_at), -o.id)
      > (j.priority, -extract(epoch FROM j.scheduled_at), -j.id);

-- name: job_prune
-- One bounded batch: short locks, repeated by the pruner until nothing is left. The ids
-- go in as an array (= ANY), so the delete is one primary-key probe per id; with IN
-- (subquery) the generic plan hash-joined the batch against every job of the table.
-- queue limits the batch to one queue (a pass with that queue's own retention);
-- otherwise the queues named in exclude (a JSON array) are left to their own passes.
DELETE FROM conveyor_jobs
WHERE id = ANY(ARRAY(
    SELECT id FROM conveyor_jobs AS j
    WHERE ((state IN ('completed', 'cancelled')
            AND finished_at < now() - %(completed_age)s::float8 * interval '1 second')
        OR (state = 'discarded'
            AND finished_at < now() - %(discarded_age)s::float8 * interval '1 second'))
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND (%(queue)s::text IS NOT NULL
           OR queue <> ALL(ARRAY(SELECT jsonb_array_elements_text(%(exclude)s::jsonb))))
      -- a finished dependency stays while a dependent still waits (it reads its result)
      AND (NOT j.followers OR NOT EXISTS (  -- waiting dependents, by id (schema 14)
          SELECT 1 FROM conveyor_jobs AS w
          WHERE w.id = ANY(ARRAY(SELECT d.job_id FROM conveyor_job_deps AS d
                                 WHERE d.depends_on = j.id))
            AND w.state || '' = 'pending'))
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
))
RETURNING id;

-- name: node_prune
-- Silent for age and past its own ttl (a node may declare a ttl longer than age).
DELETE FROM conveyor_nodes
WHERE heartbeat_at < now() - greatest(%(age)s::float8, ttl) * interval '1 second';

-- name: rate_limit_prune
DELETE FROM conveyor_rate_limits WHERE tat < now() - %(age)s::float8 * interval '1 second';

-- name: rate_limit_lock
-- Upsert that locks the key's budget row until the transaction ends (new keys start at 0).
INSERT INTO conveyor_rate_limits AS r (key, tat) VALUES (%(key)s, to_timestamp(0))
ON CONFLICT (key) DO UPDATE SET tat = r.tat
RETURNING extract(epoch FROM r.tat)::float8 AS tat;

-- name: concurrency_lock
-- Serialises slot grants per key across every process until the transaction ends.
SELECT pg_advisory_xact_lock(hashtextextended('conveyor:' || %(key)s, 0)) AS key;
