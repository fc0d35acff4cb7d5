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
