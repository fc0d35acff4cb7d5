-- Conveyor schema version 12 (SQLite): finished jobs leave the hot table.
-- The archiver (a leader service) moves completed, cancelled and discarded jobs from
-- conveyor_jobs into conveyor_jobs_history in bounded batches, so the hot table and its
-- indexes hold live jobs only. Reads go through the view conveyor_jobs_all (hot UNION ALL
-- history). SQLite has no partitions: history is a plain table and the pruner deletes
-- its old rows in batches, as it did from conveyor_jobs.
--
-- History has conveyor_jobs' columns in conveyor_jobs' order (whatever the migrations
-- before this one added), so a row moves with "SELECT *". A later migration that adds a
-- column to conveyor_jobs adds it here too and re-creates the view.
-- Existing finished rows are left to the archiver; every read finds them in either table.
CREATE TABLE IF NOT EXISTS conveyor_jobs_history AS SELECT * FROM conveyor_jobs WHERE 0;
CREATE UNIQUE INDEX IF NOT EXISTS conveyor_jobs_history_id_idx ON conveyor_jobs_history (id);
CREATE INDEX IF NOT EXISTS conveyor_jobs_history_state_idx
    ON conveyor_jobs_history (state, queue, id);
CREATE INDEX IF NOT EXISTS conveyor_jobs_history_task_idx ON conveyor_jobs_history (task, id);
CREATE INDEX IF NOT EXISTS conveyor_jobs_history_finished_idx
    ON conveyor_jobs_history (finished_at);
CREATE INDEX IF NOT EXISTS conveyor_jobs_history_unique_idx
    ON conveyor_jobs_history (unique_key) WHERE unique_key IS NOT NULL;

-- Every job, live or finished: what reads use.
CREATE VIEW IF NOT EXISTS conveyor_jobs_all AS
    SELECT * FROM conveyor_jobs
    UNION ALL
    SELECT * FROM conveyor_jobs_history;
