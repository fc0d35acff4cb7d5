-- Conveyor schema version 20 (SQLite): fair keys (docs/flow-control.md "Fair keys").
-- A job's fair key (NULL for a job without one): claims of a queue with fair-keyed work
-- take its jobs round-robin across the keys that have work. History gets the column too
-- and the view of both tables is re-created (schema 12: columns in conveyor_jobs' order).
ALTER TABLE conveyor_jobs ADD COLUMN fair_key TEXT;
ALTER TABLE conveyor_jobs_history ADD COLUMN fair_key TEXT;
DROP VIEW IF EXISTS conveyor_jobs_all;
CREATE VIEW conveyor_jobs_all AS
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
    queue    TEXT NOT NULL,
    fair_key TEXT NOT NULL,
    weight   REAL NOT NULL DEFAULT 1.0 CHECK (weight > 0),
    vtime    REAL NOT NULL DEFAULT 0.0,
    PRIMARY KEY (queue, fair_key)
);
