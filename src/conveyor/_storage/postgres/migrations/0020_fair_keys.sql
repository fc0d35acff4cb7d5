-- Conveyor schema version 20 (PostgreSQL): fair keys (docs/flow-control.md "Fair keys").
-- A job's fair key (NULL for a job without one): claims of a queue with fair-keyed work
-- take its jobs round-robin across the keys that have work. History gets the column too
-- (every partition through its parent) and the view of both tables is re-created
-- (schema 12: columns in conveyor_jobs' order; a new column goes last).
ALTER TABLE conveyor_jobs ADD COLUMN IF NOT EXISTS fair_key text;
ALTER TABLE conveyor_jobs_history ADD COLUMN IF NOT EXISTS fair_key text;
CREATE OR REPLACE VIEW conveyor_jobs_all AS
    SELECT * FROM conveyor_jobs
    UNION ALL
    SELECT * FROM conveyor_jobs_history;

-- Available fair-keyed jobs, per key in claim order: the fair claim's keys (a skip scan)
-- and each key's next jobs. Partial: a job without a fair key is never in it, so plain
-- jobs maintain nothing more than before.
CREATE INDEX IF NOT EXISTS conveyor_jobs_fair_idx
    ON conveyor_jobs (queue, fair_key, priority DESC, scheduled_at, id)
    WHERE state = 'available' AND fair_key IS NOT NULL;

-- Per queue and key: its weight (app.set_fair_weight) and its virtual time, how much
-- service it had, per unit of weight. The key '' stands for a fair queue's jobs
-- without a key (a user's key is never empty).
CREATE TABLE IF NOT EXISTS conveyor_fair_keys (
    queue    text NOT NULL,
    fair_key text NOT NULL,
    weight   double precision NOT NULL DEFAULT 1.0 CHECK (weight > 0),
    vtime    double precision NOT NULL DEFAULT 0.0,
    PRIMARY KEY (queue, fair_key)
);
