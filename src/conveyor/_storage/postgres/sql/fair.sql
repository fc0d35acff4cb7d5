-- Conveyor named queries, PostgreSQL dialect: fair keys (docs/flow-control.md "Fair keys").
-- The plan (which key gives how many jobs) is fairness.py's; these read and write it.
-- A claim takes a transaction-scoped lock per queue first (job_fair_lock): fair claims
-- of one queue take turns across processes, so the keys' virtual times are exact.

-- name: job_fair_pending
-- Does the queue have fair-keyed work? (a producer's occasional look: the fair index)
SELECT EXISTS (SELECT 1 FROM conveyor_jobs
               WHERE state = 'available' AND queue = %(queue)s::text
                 AND fair_key IS NOT NULL) AS pending;

-- name: job_fair_lock
SELECT pg_advisory_xact_lock(hashtext('conveyor_fair'), hashtext(%(queue)s::text));

-- name: job_fair_keys
-- The keys with available work (a skip scan of the fair index, one probe per key:
-- ORDER BY ... LIMIT 1, not min(), so that no plan reads the whole range), each with
-- its next job's priority, its weight and virtual time; then the queue's jobs without
-- a key, as key '', if one is among its first LOOKAHEAD jobs (0: not looked for).
WITH RECURSIVE k(fair_key) AS (
    SELECT (SELECT fair_key FROM conveyor_jobs
            WHERE state = 'available' AND queue = %(queue)s::text AND fair_key IS NOT NULL
            ORDER BY fair_key LIMIT 1)
    UNION ALL
    SELECT (SELECT j.fair_key FROM conveyor_jobs AS j
            WHERE j.state = 'available' AND j.queue = %(queue)s::text AND j.fair_key IS NOT NULL
              AND j.fair_key > k.fair_key
            ORDER BY j.fair_key LIMIT 1)
    FROM k WHERE k.fair_key IS NOT NULL
)
SELECT k.fair_key,
       (SELECT j.priority FROM conveyor_jobs AS j
        WHERE j.state = 'available' AND j.queue = %(queue)s::text AND j.fair_key IS NOT NULL
          AND j.fair_key = k.fair_key
        ORDER BY j.priority DESC LIMIT 1) AS priority,
       coalesce(f.weight, 1.0) AS weight, coalesce(f.vtime, 0.0) AS vtime
FROM k LEFT JOIN conveyor_fair_keys AS f
    ON f.queue = %(queue)s::text AND f.fair_key = k.fair_key
WHERE k.fair_key IS NOT NULL
UNION ALL
SELECT '', h.priority, coalesce(f.weight, 1.0), coalesce(f.vtime, 0.0)
FROM (SELECT max(priority) AS priority
      FROM (SELECT priority, fair_key FROM conveyor_jobs
            WHERE state = 'available' AND queue = %(queue)s::text
            ORDER BY priority DESC, scheduled_at, id LIMIT %(lookahead)s) AS a
      WHERE fair_key IS NULL) AS h
LEFT JOIN conveyor_fair_keys AS f ON f.queue = %(queue)s::text AND f.fair_key = ''
WHERE h.priority IS NOT NULL;

-- name: job_fetch_available_fair_one
-- The whole fair claim in one statement, for a claimer without labels or task filter
-- while its queue has no keyless jobs to look for (fair.py): the plan of fairness.py
-- in SQL, for the keys at the top priority. The rows of the keys with work are locked
-- first, in key order (FOR UPDATE reads their latest virtual times, whatever the
-- statement's snapshot), so fair claims of a queue take turns; a job another claim
-- took meanwhile is skipped by the LATERAL's FOR UPDATE (its state is read again).
-- Its plan is the same whatever the values (the limit is read through a sub-SELECT,
-- so no estimate depends on it): PostgreSQL keeps the prepared statement's generic
-- plan instead of planning it again at every claim (half its cost, measured). The
-- claimed ids reach the UPDATE as an array (= ANY: by the primary key), not through a
-- join: estimated at a tenth of a key's backlog (LIMIT q.n), a join was a hash of the
-- whole table at every claim once the table had statistics.
-- k: the keys with available work, each with its next job (priority, scheduled_at,
-- id: the first entry of its range in the fair index): a skip scan, one probe per key.
-- Each key's jobs are then taken from that job on, (scheduled_at, id) >= its own: the
-- range starts past the entries of jobs claimed before (dead, walked once, by the
-- probe), and a plan on the queue's plain index (a table without statistics yet ties
-- the two) walks from that job, not across the whole backlog of the keys before it.
WITH RECURSIVE k(fair_key, priority, scheduled_at, id) AS (
    (SELECT fair_key, priority, scheduled_at, id FROM conveyor_jobs
     WHERE state = 'available' AND queue = %(queue)s::text AND fair_key IS NOT NULL
     ORDER BY fair_key, priority DESC, scheduled_at, id LIMIT 1)
    UNION ALL
    SELECT n.fair_key, n.priority, n.scheduled_at, n.id
    FROM k CROSS JOIN LATERAL (
        SELECT j.fair_key, j.priority, j.scheduled_at, j.id FROM conveyor_jobs AS j
        WHERE j.state = 'available' AND j.queue = %(queue)s::text AND j.fair_key IS NOT NULL
          AND j.fair_key > k.fair_key
        ORDER BY j.fair_key, j.priority DESC, j.scheduled_at, j.id LIMIT 1
    ) AS n
), f AS (
    SELECT fair_key, weight, vtime FROM conveyor_fair_keys
    WHERE queue = %(queue)s::text AND fair_key = ANY(ARRAY(SELECT fair_key FROM k))
    ORDER BY fair_key  -- locked in key order by every claim: no deadlock
    FOR UPDATE
), w AS (
    SELECT k.fair_key, k.priority, k.scheduled_at, k.id,
           coalesce(f.weight, 1.0) AS weight, coalesce(f.vtime, 0.0) AS vtime
    FROM k LEFT JOIN f ON f.fair_key = k.fair_key
), s AS (
    SELECT fair_key, priority, scheduled_at, id, weight,
           greatest(vtime, (SELECT max(vtime) FROM w) - 1.0) AS start
    FROM w
    WHERE priority = (SELECT max(priority) FROM w)
    ORDER BY greatest(vtime, (SELECT max(vtime) FROM w) - 1.0) + 1.0 / weight, fair_key
    LIMIT (SELECT %(limit)s::integer)
), q AS (
    SELECT t.fair_key, min(t.priority) AS priority, min(t.scheduled_at) AS scheduled_at,
           min(t.id) AS id, min(t.start) AS start, min(t.weight) AS weight,
           count(*)::integer AS n
    FROM (SELECT s.* FROM s CROSS JOIN generate_series(1, (SELECT %(limit)s::integer)) AS g(n)
          ORDER BY s.start + g.n / s.weight, s.fair_key
          LIMIT (SELECT %(limit)s::integer)) AS t
    GROUP BY t.fair_key
), claimed AS (
    UPDATE conveyor_jobs AS j
    {job_claim_lease}
    FROM {job_claim_commit}
    WHERE j.id = ANY(ARRAY(
        SELECT c.id
        FROM q CROSS JOIN LATERAL (
            SELECT id FROM conveyor_jobs
            WHERE state = 'available' AND queue = %(queue)s::text AND fair_key IS NOT NULL
              AND fair_key = q.fair_key AND priority = q.priority
              AND (scheduled_at, id) >= (q.scheduled_at, q.id)
              AND requires IS NULL  -- routed: job_claim_route (schema.routed_claims)
            ORDER BY priority DESC, scheduled_at, id
            LIMIT q.n
            FOR UPDATE SKIP LOCKED
        ) AS c
    ))
    RETURNING {claim_columns}
), served AS (
    INSERT INTO conveyor_fair_keys (queue, fair_key, vtime)
    SELECT %(queue)s::text, q.fair_key, q.start + count(*) / q.weight
    FROM claimed JOIN q ON q.fair_key = claimed.fair_key
    GROUP BY q.fair_key, q.start, q.weight
    ORDER BY q.fair_key  -- rows locked in key order by every claim: no deadlock
    ON CONFLICT (queue, fair_key) DO UPDATE SET vtime = excluded.vtime
)
SELECT * FROM claimed;

-- name: job_fetch_available_fair
-- Each key's next jobs at one priority (parallel arrays of keys, counts, and the
-- plan's start and weight per key), in one statement: a LATERAL probe of the fair
-- index per key; the served keys' new virtual times (start + jobs / weight) are
-- written by the same statement, so that COMMIT can follow it in one round trip. The
-- ids reach the UPDATE as an array, as in job_fetch_available_fair_one.
WITH claimed AS (
    UPDATE conveyor_jobs AS j
    {job_claim_lease}
    FROM {job_claim_commit}
    WHERE j.id = ANY(ARRAY(
        SELECT c.id
        FROM unnest(%(fair_key)s::text[], %(limit)s::integer[]) AS k(fair_key, n)
        CROSS JOIN LATERAL (
            SELECT id FROM conveyor_jobs
            WHERE state = 'available' AND queue = %(queue)s::text AND fair_key IS NOT NULL
              AND fair_key = k.fair_key AND priority = %(priority)s::smallint
              AND requires IS NULL  -- routed: job_claim_route (schema.routed_claims)
            ORDER BY priority DESC, scheduled_at, id
            LIMIT k.n
            FOR UPDATE SKIP LOCKED
        ) AS c
    ))
    RETURNING {claim_columns}
), served AS (
    INSERT INTO conveyor_fair_keys (queue, fair_key, vtime)
    SELECT %(queue)s::text, s.fair_key, s.start + count(*) / s.weight
    FROM claimed
    JOIN unnest(%(fair_key)s::text[], %(start)s::float8[], %(weight)s::float8[])
         AS s(fair_key, start, weight) ON s.fair_key = claimed.fair_key
    GROUP BY s.fair_key, s.start, s.weight
    ORDER BY s.fair_key  -- rows locked in key order by every claim: no deadlock
    ON CONFLICT (queue, fair_key) DO UPDATE SET vtime = excluded.vtime
)
SELECT * FROM claimed;

-- name: job_fetch_available_fair_plain
-- The next jobs without a fair key at one priority, among the queue's first
-- %(lookahead)s jobs in plain order (the UPDATE re-checks each row's state); the key
-- '' gets its new virtual time in the same statement, as above.
WITH claimed AS (
    UPDATE conveyor_jobs AS j
    {job_claim_lease}
    FROM {job_claim_commit}, (
        SELECT id FROM (SELECT id, priority, fair_key FROM conveyor_jobs
                        WHERE state = 'available' AND queue = %(queue)s::text
                          AND requires IS NULL  -- routed: job_claim_route
                        ORDER BY priority DESC, scheduled_at, id LIMIT %(lookahead)s) AS a
        WHERE fair_key IS NULL AND priority = %(priority)s::smallint
        LIMIT %(limit)s
    ) AS p
    WHERE j.id = p.id AND j.state = 'available'
    RETURNING {claim_columns}
), served AS (
    INSERT INTO conveyor_fair_keys (queue, fair_key, vtime)
    SELECT %(queue)s::text, '', %(start)s::float8 + count(*) / %(weight)s::float8
    FROM claimed HAVING count(*) > 0
    ON CONFLICT (queue, fair_key) DO UPDATE SET vtime = excluded.vtime
)
SELECT * FROM claimed;

-- name: job_fair_served
-- The served keys' new virtual times (parallel arrays).
INSERT INTO conveyor_fair_keys (queue, fair_key, vtime)
SELECT %(queue)s::text, s.fair_key, s.vtime
FROM unnest(%(fair_key)s::text[], %(vtime)s::float8[]) AS s(fair_key, vtime)
ORDER BY s.fair_key
ON CONFLICT (queue, fair_key) DO UPDATE SET vtime = excluded.vtime;

-- name: fair_weight_set
INSERT INTO conveyor_fair_keys (queue, fair_key, weight)
VALUES (%(queue)s::text, %(fair_key)s::text, %(weight)s::float8)
ON CONFLICT (queue, fair_key) DO UPDATE SET weight = excluded.weight;

-- name: fair_key_list
-- A queue's keys with waiting (available) jobs, then its keys with a weight set and
-- none waiting.
SELECT w.queue, w.fair_key, w.waiting, coalesce(f.weight, 1.0) AS weight,
       coalesce(f.vtime, 0.0) AS vtime
FROM (SELECT queue, fair_key, count(*) AS waiting FROM conveyor_jobs
      WHERE state = 'available' AND queue = %(queue)s::text AND fair_key IS NOT NULL
      GROUP BY queue, fair_key) AS w
LEFT JOIN conveyor_fair_keys AS f ON f.queue = %(queue)s::text AND f.fair_key = w.fair_key
UNION ALL
SELECT f.queue, f.fair_key, 0, f.weight, f.vtime FROM conveyor_fair_keys AS f
WHERE f.fair_key <> '' AND f.queue = %(queue)s::text
  AND NOT EXISTS (SELECT 1 FROM conveyor_jobs AS j
                  WHERE j.state = 'available' AND j.queue = f.queue
                    AND j.fair_key IS NOT NULL AND j.fair_key = f.fair_key)
ORDER BY 1, 2
LIMIT %(limit)s;

-- name: fair_key_prune
-- The pruner's batch of idle keys (docs/flow-control.md "Fair keys"): rows at the default
-- weight (an operator's weight is configuration, kept) whose key has no available job.
-- Forgetting one loses no turn: a key without a row starts at greatest(0, the busiest
-- key's vtime - 1), level with the keys that have work, as a long-idle key does (only
-- an old vtime beyond that, left from before the queue last ran dry, is forgiven: the
-- key starts level, as a new key). The key '' (a queue's keyless jobs: one row per fair
-- queue, not per key) is kept: no index tells cheaply whether a queue has keyless jobs
-- waiting. Each row's key is probed in
-- the fair index (a scalar sub-SELECT, LIMIT 1: never planned as a join that would walk
-- the whole index). SKIP LOCKED: a row a claim holds (it locks the keys with work, in
-- key order) is left for the next pass; the pruner waits on no row lock, so it is never
-- in a deadlock with a claim. The rows are deleted by their ctid, as locked (a TID scan).
-- A claim that serves a key after its row went upserts it again.
DELETE FROM conveyor_fair_keys
WHERE ctid = ANY(ARRAY(
    SELECT f.ctid FROM conveyor_fair_keys AS f
    WHERE f.weight = 1.0 AND f.fair_key <> ''
      AND (SELECT 1 FROM conveyor_jobs AS j
           WHERE j.state = 'available' AND j.queue = f.queue
             AND j.fair_key IS NOT NULL AND j.fair_key = f.fair_key
           LIMIT 1) IS NULL
    ORDER BY f.queue, f.fair_key
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED))
RETURNING fair_key;
