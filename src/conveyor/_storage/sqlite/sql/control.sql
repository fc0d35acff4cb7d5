-- Cluster control, SQLite dialect: queues, nodes, leadership, schedules, limits, pruning.

-- name: clock_now
SELECT (julianday('now') - 2440587.5) * 86400.0 AS now;

-- name: queue_list
SELECT * FROM conveyor_queues ORDER BY name;

-- name: queue_update
-- Upsert one queue's settings; each set_* flag says whether that column changes.
INSERT INTO conveyor_queues (name, paused, concurrency, scope, rate_limit, backoff,
                             completed_retention, discarded_retention, updated_at)
VALUES (:name, coalesce(:paused, 0), :concurrency, coalesce(:scope, 'split'), :rate_limit,
        :backoff, :completed_retention, :discarded_retention,
        (julianday('now') - 2440587.5) * 86400.0)
ON CONFLICT (name) DO UPDATE SET
    paused = CASE WHEN :set_paused THEN excluded.paused ELSE paused END,
    concurrency = CASE WHEN :set_concurrency THEN excluded.concurrency ELSE concurrency END,
    scope = CASE WHEN :set_concurrency THEN excluded.scope ELSE scope END,
    rate_limit = CASE WHEN :set_rate_limit THEN excluded.rate_limit ELSE rate_limit END,
    backoff = CASE WHEN :set_backoff THEN excluded.backoff ELSE backoff END,
    completed_retention = CASE WHEN :set_completed_retention
                               THEN excluded.completed_retention ELSE completed_retention END,
    discarded_retention = CASE WHEN :set_discarded_retention
                               THEN excluded.discarded_retention ELSE discarded_retention END,
    updated_at = excluded.updated_at;

-- name: node_list
-- Alive while the last heartbeat is younger than the node's own ttl (:live_within
-- overrides it when given).
SELECT *, heartbeat_at >= (julianday('now') - 2440587.5) * 86400.0
                          - coalesce(:live_within, ttl) AS alive
FROM conveyor_nodes ORDER BY id;

-- name: leader_elect
-- Take the role if it is free or expired, or renew it if held; the term grows on change.
INSERT INTO conveyor_leader (name, node_id, term, elected_at, expires_at)
VALUES (:name, :node_id, 1, (julianday('now') - 2440587.5) * 86400.0,
        (julianday('now') - 2440587.5) * 86400.0 + :ttl)
ON CONFLICT (name) DO UPDATE SET
    term = CASE WHEN node_id = excluded.node_id THEN term ELSE term + 1 END,
    elected_at = CASE WHEN node_id = excluded.node_id THEN elected_at ELSE excluded.elected_at END,
    node_id = excluded.node_id,
    expires_at = excluded.expires_at
WHERE node_id = excluded.node_id OR expires_at < excluded.elected_at;

-- name: leader_get
SELECT * FROM conveyor_leader WHERE name = :name;

-- name: leader_resign
DELETE FROM conveyor_leader WHERE name = :name AND node_id = :node_id;

-- name: schedule_upsert
-- Code-defined schedules are re-declared by every worker: keep paused and last_tick.
INSERT INTO conveyor_schedules
    (name, task, cron, timezone, args, kwargs, queue, priority, misfire, backfill)
VALUES (:name, :task, :cron, :timezone, :args, :kwargs, :queue, :priority, :misfire, :backfill)
ON CONFLICT (name) DO UPDATE SET
    task = excluded.task, cron = excluded.cron, timezone = excluded.timezone,
    args = excluded.args, kwargs = excluded.kwargs, queue = excluded.queue,
    priority = excluded.priority, misfire = excluded.misfire, backfill = excluded.backfill,
    updated_at = (julianday('now') - 2440587.5) * 86400.0
WHERE task IS NOT excluded.task OR cron IS NOT excluded.cron
   OR timezone IS NOT excluded.timezone OR args IS NOT excluded.args
   OR kwargs IS NOT excluded.kwargs OR queue IS NOT excluded.queue
   OR priority IS NOT excluded.priority OR misfire IS NOT excluded.misfire
   OR backfill IS NOT excluded.backfill;

-- name: schedule_list
SELECT * FROM conveyor_schedules ORDER BY name;

-- name: schedule_set_paused
UPDATE conveyor_schedules
SET paused = :paused, updated_at = (julianday('now') - 2440587.5) * 86400.0
WHERE name = :name
RETURNING name;

-- name: schedule_advance
-- last_tick only moves forward, whoever writes it.
UPDATE conveyor_schedules
SET last_tick = :tick, last_job_id = coalesce(:job_id, last_job_id)
WHERE name = :name AND (last_tick IS NULL OR last_tick < :tick);

-- name: schedule_delete
DELETE FROM conveyor_schedules WHERE name = :name RETURNING name;

-- name: rate_limit_get
SELECT tat FROM conveyor_rate_limits WHERE key = :key;

-- name: rate_limit_set
INSERT INTO conveyor_rate_limits (key, tat) VALUES (:key, :tat)
ON CONFLICT (key) DO UPDATE SET tat = excluded.tat;

-- name: concurrency_count
SELECT count(*) AS n FROM conveyor_jobs
WHERE concurrency_key = :key AND state = 'running' AND holds_slot = 1;

-- name: concurrency_grant
UPDATE conveyor_jobs SET holds_slot = 1
WHERE id = :id AND lease_token = :lease_token AND state = 'running'
RETURNING id;

-- name: concurrency_holders
SELECT id FROM conveyor_jobs
WHERE concurrency_key = :key AND state = 'running' AND holds_slot = 1
ORDER BY id LIMIT 20;

-- name: job_count_ahead
-- Available jobs of the same queue that a producer claims before this one.
SELECT count(*) AS n FROM conveyor_jobs AS o, conveyor_jobs AS j
WHERE j.id = :id AND o.state = 'available' AND o.queue = j.queue AND o.id <> j.id
  AND (o.priority > j.priority
       OR (o.priority = j.priority AND (o.scheduled_at < j.scheduled_at
           OR (o.scheduled_at = j.scheduled_at AND o.id < j.id))));

-- name: job_prune
-- One bounded batch: short write locks, repeated by the pruner until nothing is left.
-- :queue limits the batch to one queue (a pass with that queue's own retention);
-- otherwise the queues named in :exclude (a JSON array) are left to their own passes.
DELETE FROM conveyor_jobs
WHERE id IN (
    SELECT id FROM conveyor_jobs AS j
    WHERE ((state IN ('completed', 'cancelled')
            AND finished_at < (julianday('now') - 2440587.5) * 86400.0 - :completed_age)
        OR (state = 'discarded'
            AND finished_at < (julianday('now') - 2440587.5) * 86400.0 - :discarded_age))
      AND (:queue IS NULL OR queue = :queue)
      AND (:queue IS NOT NULL OR queue NOT IN (SELECT value FROM json_each(:exclude)))
      -- a finished dependency stays while a dependent still waits (it reads its result)
      AND (j.followers = 0 OR NOT EXISTS (
          SELECT 1 FROM conveyor_job_deps AS d JOIN conveyor_jobs AS w ON w.id = d.job_id
          WHERE d.depends_on = j.id AND w.state = 'pending'))
    LIMIT :limit
)
RETURNING id;

-- name: node_prune
-- Silent for :age and past its own ttl (a node may declare a ttl longer than :age).
DELETE FROM conveyor_nodes
WHERE heartbeat_at < (julianday('now') - 2440587.5) * 86400.0 - max(:age, ttl);

-- name: rate_limit_prune
DELETE FROM conveyor_rate_limits
WHERE tat < (julianday('now') - 2440587.5) * 86400.0 - :age;

-- name: rate_limit_lock
-- SQLite's write transaction already serialises every limit check.
SELECT tat FROM conveyor_rate_limits WHERE key = :key;

-- name: concurrency_lock
-- SQLite's write transaction already serialises every slot grant.
SELECT :key AS key;
