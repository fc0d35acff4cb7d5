-- Statements of the testing toolkit (conveyor.testing) only: the virtual clock's
-- offset (see _storage/clock.py), the claim of one chosen job (inline mode) and the
-- staging of jobs before they are due (drain(include_scheduled=True)).

-- name: clock_create
CREATE TABLE IF NOT EXISTS conveyor_test_clock (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    offset_seconds REAL    NOT NULL
);

-- name: clock_raise
-- The offset only grows: a clock never goes back, whoever advanced it last, and a
-- process joining keeps an offset another one already set. Returns the one in force.
INSERT INTO conveyor_test_clock (id, offset_seconds) VALUES (1, :offset)
ON CONFLICT (id) DO UPDATE SET offset_seconds = max(offset_seconds, excluded.offset_seconds)
RETURNING offset_seconds;

-- name: job_claim_one
-- job_fetch_available for one chosen job; with :early, also before it is due.
UPDATE conveyor_jobs
SET state = 'running',
    attempt = attempt + 1,
    attempted_at = (julianday('now') - 2440587.5) * 86400.0,
    lease_owner = :owner,
    lease_token = random() & 9223372036854775807,
    lease_expires_at = (julianday('now') - 2440587.5) * 86400.0 + :lease_ttl
WHERE id = :id
  AND (state = 'available' OR (:early AND state IN ('scheduled', 'retryable')))
RETURNING *;

-- name: job_stage_early
-- job_stage_due without the due time: every waiting job of the queue (or of any queue).
UPDATE conveyor_jobs
SET state = 'available', scheduled_at = (julianday('now') - 2440587.5) * 86400.0
WHERE state = :from_state AND (:queue IS NULL OR queue = :queue)
RETURNING id, task, queue, attempt;
