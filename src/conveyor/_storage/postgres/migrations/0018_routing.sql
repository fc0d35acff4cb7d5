-- Conveyor schema version 18 (PostgreSQL): routing jobs to the workers that can run them.
-- A job may require worker labels (@app.task(requires={"gpu": "a100"})): a JSON object
-- of string values, NULL for a job without requirements (nearly all: plain inserts and
-- COPY never write it). Only a worker whose labels contain every pair claims the job.
ALTER TABLE conveyor_jobs ADD COLUMN IF NOT EXISTS requires jsonb;
-- History keeps conveyor_jobs' columns in its order (schema 12; its partitions follow);
-- the view gains the column at its end.
ALTER TABLE conveyor_jobs_history ADD COLUMN IF NOT EXISTS requires jsonb;
CREATE OR REPLACE VIEW conveyor_jobs_all AS
    SELECT * FROM conveyor_jobs
    UNION ALL
    SELECT * FROM conveyor_jobs_history;
-- The jobs that require labels, per queue and state (the dashboard's counts, explain):
-- empty while no job has requirements.
CREATE INDEX IF NOT EXISTS conveyor_jobs_requires_idx ON conveyor_jobs (queue, state, requires)
    WHERE requires IS NOT NULL;
-- A worker started with --tasks serves only those tasks (a JSON array); NULL: every task
-- it knows (conveyor_nodes.tasks).
ALTER TABLE conveyor_nodes ADD COLUMN IF NOT EXISTS serves jsonb;
