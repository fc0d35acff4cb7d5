-- Job expiry (task.options(expires_in=...)): a job not started by expires_at never runs;
-- it ends cancelled with the reason "expired". NULL for every job without one, so a plain
-- job pays nothing. The partial index serves the expirer's scan of waiting jobs past
-- their time; it holds only the jobs that have an expiry.
ALTER TABLE conveyor_jobs ADD COLUMN expires_at REAL;
CREATE INDEX IF NOT EXISTS conveyor_jobs_expires_idx ON conveyor_jobs (expires_at)
    WHERE expires_at IS NOT NULL;

-- History keeps conveyor_jobs' columns in its order (rows move with SELECT *).
ALTER TABLE conveyor_jobs_history ADD COLUMN expires_at REAL;
DROP VIEW IF EXISTS conveyor_jobs_all;
CREATE VIEW conveyor_jobs_all AS
    SELECT * FROM conveyor_jobs
    UNION ALL
    SELECT * FROM conveyor_jobs_history;
