-- Conveyor named queries, SQLite dialect: fair keys (docs/flow-control.md "Fair keys").
-- The plan (which key gives how many jobs) is fairness.py's; these read and write it.
-- A claim's statements run in one write transaction: processes sharing the file take
-- turns, so the keys' virtual times are exact.

-- name: job_fair_pending
-- Does the queue have fair-keyed work? (a producer's occasional look: the fair index)
SELECT EXISTS (SELECT 1 FROM conveyor_jobs
               WHERE state = 'available' AND queue = :queue AND fair_key IS NOT NULL) AS pending;

-- name: job_fair_lock
-- PostgreSQL takes a lock per queue here; SQLite's write transaction already is one.
SELECT 1;

-- name: job_fair_keys
-- The keys with available work (a skip scan of the fair index, one probe per key:
-- ORDER BY ... LIMIT 1, not min(), so that no plan reads the whole range), each with
-- its next job's priority, its weight and virtual time; then the queue's jobs without
-- a key, as key '', if one is among its first LOOKAHEAD jobs (0: not looked for).
WITH RECURSIVE k(fair_key) AS (
    SELECT (SELECT fair_key FROM conveyor_jobs
            WHERE state = 'available' AND queue = :queue AND fair_key IS NOT NULL
            ORDER BY fair_key LIMIT 1)
    UNION ALL
    SELECT (SELECT j.fair_key FROM conveyor_jobs AS j
            WHERE j.state = 'available' AND j.queue = :queue AND j.fair_key IS NOT NULL
              AND j.fair_key > k.fair_key
            ORDER BY j.fair_key LIMIT 1)
    FROM k WHERE k.fair_key IS NOT NULL
)
SELECT k.fair_key,
       (SELECT j.priority FROM conveyor_jobs AS j
        WHERE j.state = 'available' AND j.queue = :queue AND j.fair_key IS NOT NULL
          AND j.fair_key = k.fair_key
        ORDER BY j.priority DESC LIMIT 1) AS priority,
       coalesce(f.weight, 1.0) AS weight, coalesce(f.vtime, 0.0) AS vtime
FROM k LEFT JOIN conveyor_fair_keys AS f ON f.queue = :queue AND f.fair_key = k.fair_key
WHERE k.fair_key IS NOT NULL
UNION ALL
SELECT '', h.priority, coalesce(f.weight, 1.0), coalesce(f.vtime, 0.0)
FROM (SELECT max(priority) AS priority
      FROM (SELECT priority, fair_key FROM conveyor_jobs
            WHERE state = 'available' AND queue = :queue
            ORDER BY priority DESC, scheduled_at, id LIMIT :lookahead)
      WHERE fair_key IS NULL) AS h
LEFT JOIN conveyor_fair_keys AS f ON f.queue = :queue AND f.fair_key = ''
WHERE h.priority IS NOT NULL;

-- name: job_fetch_available_fair_one
-- PostgreSQL claims in one statement when it can (its fair.py); SQLite's claim is
-- statements in its write transaction (sqlite/fair.py): this twin is never run.
SELECT * FROM (SELECT NULL AS requires) WHERE 0 AND requires IS NULL;

-- name: job_fetch_available_fair
-- One key's next :limit jobs at one priority (one key per call on SQLite).
UPDATE conveyor_jobs
SET state = 'running',
    attempt = attempt + 1,
    attempted_at = (julianday('now') - 2440587.5) * 86400.0,
    lease_owner = :owner,
    lease_token = random() & 9223372036854775807,
    lease_expires_at = (julianday('now') - 2440587.5) * 86400.0 + :lease_ttl
WHERE id IN (
    SELECT id FROM conveyor_jobs
    WHERE state = 'available' AND queue = :queue AND fair_key IS NOT NULL
      AND fair_key = :fair_key AND priority = :priority
      AND requires IS NULL  -- routed: job_claim_route (schema.routed_claims)
    ORDER BY priority DESC, scheduled_at, id
    LIMIT :limit
)
RETURNING {claim_columns};

-- name: job_fetch_available_fair_plain
-- The next :limit jobs without a fair key at one priority, among the queue's first
-- :lookahead jobs in plain order.
UPDATE conveyor_jobs
SET state = 'running',
    attempt = attempt + 1,
    attempted_at = (julianday('now') - 2440587.5) * 86400.0,
    lease_owner = :owner,
    lease_token = random() & 9223372036854775807,
    lease_expires_at = (julianday('now') - 2440587.5) * 86400.0 + :lease_ttl
WHERE id IN (
    SELECT id FROM (SELECT id, priority, fair_key FROM conveyor_jobs
                    WHERE state = 'available' AND queue = :queue
                      AND requires IS NULL  -- routed: job_claim_route
                    ORDER BY priority DESC, scheduled_at, id LIMIT :lookahead)
    WHERE fair_key IS NULL AND priority = :priority
    LIMIT :limit
)
RETURNING {claim_columns};

-- name: job_fair_served
-- A served key's new virtual time (one key per call on SQLite).
INSERT INTO conveyor_fair_keys (queue, fair_key, vtime)
VALUES (:queue, :fair_key, :vtime)
ON CONFLICT (queue, fair_key) DO UPDATE SET vtime = excluded.vtime;

-- name: fair_weight_set
INSERT INTO conveyor_fair_keys (queue, fair_key, weight)
VALUES (:queue, :fair_key, :weight)
ON CONFLICT (queue, fair_key) DO UPDATE SET weight = excluded.weight;

-- name: fair_key_list
-- A queue's keys with waiting (available) jobs, then its keys with a weight set and
-- none waiting.
SELECT w.queue, w.fair_key, w.waiting, coalesce(f.weight, 1.0) AS weight,
       coalesce(f.vtime, 0.0) AS vtime
FROM (SELECT queue, fair_key, count(*) AS waiting FROM conveyor_jobs
      WHERE state = 'available' AND queue = :queue AND fair_key IS NOT NULL
      GROUP BY queue, fair_key) AS w
LEFT JOIN conveyor_fair_keys AS f ON f.queue = :queue AND f.fair_key = w.fair_key
UNION ALL
SELECT f.queue, f.fair_key, 0, f.weight, f.vtime FROM conveyor_fair_keys AS f
WHERE f.fair_key <> '' AND f.queue = :queue
  AND NOT EXISTS (SELECT 1 FROM conveyor_jobs AS j
                  WHERE j.state = 'available' AND j.queue = f.queue
                    AND j.fair_key IS NOT NULL AND j.fair_key = f.fair_key)
ORDER BY 1, 2
LIMIT :limit;

-- name: fair_key_prune
-- The pruner's batch of idle keys (docs/flow-control.md "Fair keys"): rows at the default
-- weight (an operator's weight is configuration, kept) whose key has no available job
-- (a probe of the fair index per row: the index's WHERE terms repeated). Forgetting one
-- loses no turn: a key without a row starts at max(0, the busiest key's vtime - 1), level
-- with the keys that have work, as a long-idle key does (only an old vtime beyond that,
-- left from before the queue last ran dry, is forgiven: the key starts level, as a new
-- key). The key '' (a queue's keyless jobs: one row per fair queue, not per key) is
-- kept: no index tells cheaply whether a queue has keyless jobs waiting. The write
-- transaction takes turns with the claims'; a claim that serves a key after its row
-- went inserts it again.
DELETE FROM conveyor_fair_keys WHERE rowid IN (
    SELECT f.rowid FROM conveyor_fair_keys AS f
    WHERE f.weight = 1.0 AND f.fair_key <> ''
      AND NOT EXISTS (SELECT 1 FROM conveyor_jobs AS j
                      WHERE j.state = 'available' AND j.queue = f.queue
                        AND j.fair_key IS NOT NULL AND j.fair_key = f.fair_key)
    LIMIT :limit)
RETURNING fair_key;
