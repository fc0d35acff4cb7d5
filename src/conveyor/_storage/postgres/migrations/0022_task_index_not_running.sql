-- Conveyor schema version 22 (PostgreSQL): running jobs leave the task index.
-- A claim changes state, so it is never a HOT update: PostgreSQL adds an entry for the
-- new row version to every index whose predicate that version satisfies. Every other
-- index of the hot table is partial; (task, id) was not, so each claim paid for an
-- entry there (about 3 µs of 18 per job here) and vacuum for removing it. Running rows
-- are few (at most the workers' concurrency) and already indexed by
-- conveyor_jobs_lease_idx, so the task index now leaves them out. Reads that filter by
-- task take the running rows from the lease index (conveyor_jobs_split). Rebuilding
-- the index locks writes to the table for as long as it takes (about a second per
-- million rows here).
DROP INDEX IF EXISTS conveyor_jobs_task_idx;
CREATE INDEX IF NOT EXISTS conveyor_jobs_task_idx ON conveyor_jobs (task, id)
    WHERE state <> 'running';

-- Every job, as conveyor_jobs_all, for the reads that filter by task: the hot table
-- twice, whole (running_part false) and its running rows alone (true), then history.
-- A query keeps one of the two (the job_task_parts fragment): without a task filter the
-- whole hot table, as before; with one, its rows that are not running, which the
-- planner reads through the task index in id order, and the running ones, which the
-- second part reads through the lease index (its WHERE makes it a subquery planned on
-- its own, so never a walk of the primary key), merged by id. History never holds a
-- running job. Like conveyor_jobs_all, a migration that adds a column to
-- conveyor_jobs re-creates it.
CREATE OR REPLACE VIEW conveyor_jobs_split AS
    SELECT u.* FROM (
        SELECT *, false AS running_part FROM conveyor_jobs
        UNION ALL
        SELECT *, true FROM conveyor_jobs WHERE state = 'running'
        UNION ALL
        SELECT *, false FROM conveyor_jobs_history
    ) AS u;
