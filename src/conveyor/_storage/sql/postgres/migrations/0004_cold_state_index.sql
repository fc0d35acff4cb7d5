-- Conveyor schema version 4 (PostgreSQL): the state index leaves out the hot states.
-- A state change is never a HOT update, so every claim and every completion added an
-- entry to (state, queue, id), and vacuum had to remove one. Available rows are already
-- indexed by conveyor_jobs_fetch_idx and running rows by conveyor_jobs_lease_idx, so this
-- index now holds only the other states. Rebuilding it locks writes to the table for as
-- long as it takes to index the cold rows (about a second per million here).
DROP INDEX IF EXISTS conveyor_jobs_state_idx;
CREATE INDEX IF NOT EXISTS conveyor_jobs_state_idx ON conveyor_jobs (state, queue, id)
    WHERE state NOT IN ('available', 'running');
