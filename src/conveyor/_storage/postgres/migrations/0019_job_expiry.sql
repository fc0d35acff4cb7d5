-- Job expiry (task.options(expires_in=...)): a job not started by expires_at never runs;
-- it ends cancelled with the reason "expired". NULL for every job without one, so a plain
-- job pays nothing (no update touches it: claims and acks stay HOT). The partial index
-- serves the expirer's scan of waiting jobs past their time; it holds only the jobs
-- that have an expiry.
ALTER TABLE conveyor_jobs ADD COLUMN IF NOT EXISTS expires_at timestamptz;
CREATE INDEX IF NOT EXISTS conveyor_jobs_expires_idx ON conveyor_jobs (expires_at)
    WHERE expires_at IS NOT NULL;

-- History keeps conveyor_jobs' columns in its order (rows move with SELECT *); the view
-- gains the column at its end.
ALTER TABLE conveyor_jobs_history ADD COLUMN IF NOT EXISTS expires_at timestamptz;
CREATE OR REPLACE VIEW conveyor_jobs_all AS
    SELECT * FROM conveyor_jobs
    UNION ALL
    SELECT * FROM conveyor_jobs_history;
