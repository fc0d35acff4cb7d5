-- Conveyor schema version 4 (SQLite): the state index leaves out the hot states.
-- Every claim and every completion used to move a row inside (state, queue, id): two
-- B-tree writes per state change on the hottest path, and a deeper tree to write the
-- more finished rows the table keeps. Available rows are already indexed by
-- conveyor_jobs_fetch_idx and running rows by conveyor_jobs_lease_idx, so this index
-- now holds only the other states. Queries that want it repeat its WHERE term
-- (SQLite uses a partial index only when the query contains the index's terms).
DROP INDEX IF EXISTS conveyor_jobs_state_idx;
CREATE INDEX IF NOT EXISTS conveyor_jobs_state_idx ON conveyor_jobs (state, queue, id)
    WHERE state NOT IN ('available', 'running');

-- Jobs waiting or running per queue and state: the dashboard's depth and the per-minute
-- depth sample. One index per part: available rows in the fetch index, running rows in
-- the lease index, the rest in the cold state index (its WHERE term repeated for SQLite).
CREATE VIEW IF NOT EXISTS conveyor_queue_depth AS
    SELECT queue, 'available' AS state, count(*) AS n FROM conveyor_jobs
    WHERE state = 'available' GROUP BY queue
    UNION ALL
    SELECT queue, 'running', count(*) FROM conveyor_jobs
    WHERE state = 'running' GROUP BY queue
    UNION ALL
    SELECT queue, state, count(*) FROM conveyor_jobs
    WHERE state IN ('scheduled', 'retryable') AND state NOT IN ('available', 'running')
    GROUP BY queue, state;
