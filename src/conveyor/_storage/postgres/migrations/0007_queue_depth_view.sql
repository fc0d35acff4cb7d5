-- Conveyor schema version 7 (PostgreSQL): the conveyor_queue_depth view, for databases
-- that applied migration 4 before the view was added to it (published migrations never
-- change; this one repairs them). Idempotent: CREATE OR REPLACE gives a database that has
-- the view the same definition it already has.
--
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
