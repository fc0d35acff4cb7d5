-- Statements of the testing toolkit (conveyor.testing) only: the virtual clock's
-- offset (see _storage/clock.py), the claim of one chosen job (inline mode) and the
-- staging of jobs before they are due (drain(include_scheduled=True)).

-- name: clock_create
CREATE TABLE IF NOT EXISTS conveyor_test_clock (
    id             integer PRIMARY KEY CHECK (id = 1),
    offset_seconds float8  NOT NULL
);

-- name: clock_raise
-- The offset only grows: a clock never goes back, whoever advanced it last, and a
-- process joining keeps an offset another one already set. Returns the one in force.
INSERT INTO conveyor_test_clock AS c (id, offset_seconds) VALUES (1, %(offset)s::float8)
ON CONFLICT (id) DO UPDATE SET offset_seconds = greatest(c.offset_seconds, excluded.offset_seconds)
RETURNING offset_seconds;

-- name: job_claim_one
-- job_fetch_available for one chosen job; with %(early)s, also before it is due.
UPDATE conveyor_jobs
SET state = 'running',
    attempt = attempt + 1,
    attempted_at = now(),
    lease_owner = %(owner)s::text,
    lease_token = 1 + floor(random() * 9.0e18)::bigint,
    lease_expires_at = now() + %(lease_ttl)s::float8 * interval '1 second'
WHERE id = %(id)s::bigint
  AND (state = 'available' OR (%(early)s::boolean AND state IN ('scheduled', 'retryable')))
RETURNING *;

-- name: job_stage_early
-- job_stage_due without the due time: every waiting job of the queue (or of any queue).
WITH staged AS (
    UPDATE conveyor_jobs
    SET state = 'available', scheduled_at = now()
    WHERE state = %(from_state)s::text AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
    RETURNING id, task, queue, attempt
), woken AS (
    SELECT count(pg_notify(%(channel)s, q.queue)) AS n
    FROM (SELECT DISTINCT queue FROM staged) AS q
)
SELECT staged.* FROM staged CROSS JOIN woken;
