-- Conveyor schema version 4 (PostgreSQL): the state index leaves out the hot states.
-- A state change is never a HOT update, so every claim and every completion added an
-- entry to (state, queue, id), and vacuum had to remove one. Available rows are already
-- indexed by conveyor_jobs_fetch_idx and running rows by conveyor_jobs_lease_idx, so this
-- index now holds only the other states. Rebuilding it locks writes to the table for as
-- long as it takes to index the cold rows (about a second per million here).
DROP INDEX IF EXISTS conveyor_jobs_state_idx;
CREATE INDEX IF NOT EXISTS conveyor_jobs_state_idx ON conveyor_jobs (state, queue, id)
    WHERE state NOT IN ('available', 'running');

-- Jobs waiting or running per queue and state: the dashboard's depth and the per-minute
-- depth sample. One index per part: available rows in the fetch index, running rows in
-- the lease index, the rest in the cold state index (its WHERE term repeated for SQLite).
CREATE OR REPLACE VIEW conveyor_queue_depth AS
    SELECT queue, 'available' AS state, count(*) AS n FROM conveyor_jobs
    WHERE state = 'available' GROUP BY queue
    UNION ALL
    SELECT queue, 'running', count(*) FROM conveyor_jobs
    WHERE state = 'running' GROUP BY queue
    UNION ALL
    SELECT queue, state, count(*) FROM conveyor_jobs
    WHERE state IN ('scheduled', 'retryable') AND state NOT IN ('available', 'running')
    GROUP BY queue, state;
