-- Conveyor schema version 12 (PostgreSQL): finished jobs leave the hot table.
-- The archiver (a leader service) moves completed, cancelled and discarded jobs from
-- conveyor_jobs into conveyor_jobs_history in bounded batches, so the hot table and its
-- indexes hold live jobs only, whatever the retention. Reads go through the view
-- conveyor_jobs_all (hot UNION ALL history).
--
-- History has conveyor_jobs' columns in conveyor_jobs' order (LIKE copies whatever the
-- migrations before this one added), so a row moves with "SELECT *". A later migration
-- that adds a column to conveyor_jobs adds it to conveyor_jobs_history too and
-- re-creates the view.
--
-- Partitions: by state class (completed and cancelled share one retention, discarded has
-- its own, usually longer), then one partition per UTC day of finished_at, so retention
-- drops a whole day instead of deleting its rows one by one. Each class has a DEFAULT
-- partition for rows outside the days created so far (rows of earlier days, and of days
-- whose partition could not be made); the pruner deletes those by row.
-- Existing finished rows are left to the archiver: moving millions of rows here would hold
-- the migration's transaction for as long, and every read finds them in either table.
CREATE TABLE IF NOT EXISTS conveyor_jobs_history (
    LIKE conveyor_jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS
) PARTITION BY LIST (state);
CREATE TABLE IF NOT EXISTS conveyor_jobs_history_done PARTITION OF conveyor_jobs_history
    FOR VALUES IN ('completed', 'cancelled') PARTITION BY RANGE (finished_at);
CREATE TABLE IF NOT EXISTS conveyor_jobs_history_discarded PARTITION OF conveyor_jobs_history
    FOR VALUES IN ('discarded') PARTITION BY RANGE (finished_at);
CREATE TABLE IF NOT EXISTS conveyor_jobs_history_done_default
    PARTITION OF conveyor_jobs_history_done DEFAULT;
CREATE TABLE IF NOT EXISTS conveyor_jobs_history_discarded_default
    PARTITION OF conveyor_jobs_history_discarded DEFAULT;

-- The reads the hot table serves, on history: by id, by state and queue, by task; the
-- pruner's age; unique keys (an operator looking for the job that held a key).
CREATE INDEX IF NOT EXISTS conveyor_jobs_history_id_idx ON conveyor_jobs_history (id);
CREATE INDEX IF NOT EXISTS conveyor_jobs_history_state_idx
    ON conveyor_jobs_history (state, queue, id);
CREATE INDEX IF NOT EXISTS conveyor_jobs_history_task_idx ON conveyor_jobs_history (task, id);
CREATE INDEX IF NOT EXISTS conveyor_jobs_history_finished_idx
    ON conveyor_jobs_history (finished_at);
CREATE INDEX IF NOT EXISTS conveyor_jobs_history_unique_idx
    ON conveyor_jobs_history (unique_key) WHERE unique_key IS NOT NULL;

-- Day partitions from the day of ``today`` to ``days`` days after it, for both classes;
-- how many were made. A day whose rows already sit in the DEFAULT partition (the clock
-- jumped ahead, or the archiver ran before its partition existed) is skipped: those rows
-- are pruned by row. Called by the archiver (hourly) and below; ``today`` is passed in so
-- that the statement's clock decides (the testing toolkit's virtual clock included).
CREATE OR REPLACE FUNCTION conveyor_history_prepare(today timestamptz, days integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    class text;
    day date;
    part text;
    made integer := 0;
BEGIN
    FOREACH class IN ARRAY ARRAY['done', 'discarded'] LOOP
        FOR i IN 0..days LOOP
            day := (today AT TIME ZONE 'UTC')::date + i;
            part := format('conveyor_jobs_history_%s_%s', class, to_char(day, 'YYYYMMDD'));
            CONTINUE WHEN to_regclass(part) IS NOT NULL;
            BEGIN
                EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                               part, 'conveyor_jobs_history_' || class,
                               day::timestamp AT TIME ZONE 'UTC',
                               (day + 1)::timestamp AT TIME ZONE 'UTC');
                made := made + 1;
            EXCEPTION WHEN check_violation OR duplicate_table THEN
                NULL;  -- the default partition holds that day's rows, or another made it
            END;
        END LOOP;
    END LOOP;
    RETURN made;
END $$;

-- Detach and drop the day partitions of one class ('done' or 'discarded') whose whole
-- day ended before ``cutoff``; how many rows they held. Partition names carry their day.
CREATE OR REPLACE FUNCTION conveyor_history_drop(class text, cutoff timestamptz)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    part text;
    parent text := 'conveyor_jobs_history_' || class;
    n bigint;
    dropped bigint := 0;
BEGIN
    FOR part IN
        SELECT c.relname FROM pg_inherits AS i
        JOIN pg_class AS c ON c.oid = i.inhrelid
        WHERE i.inhparent = to_regclass(parent)
          AND c.relname ~ ('^' || parent || '_[0-9]{8}$')
          AND ((to_date(right(c.relname, 8), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC')
              <= cutoff
        ORDER BY c.relname
    LOOP
        EXECUTE format('SELECT count(*) FROM %I', part) INTO n;
        EXECUTE format('ALTER TABLE %I DETACH PARTITION %I', parent, part);
        EXECUTE format('DROP TABLE %I', part);
        dropped := dropped + n;
    END LOOP;
    RETURN dropped;
END $$;

SELECT conveyor_history_prepare(now(), 2);

-- Every job, live or finished: what reads use. Filters push into both branches.
CREATE OR REPLACE VIEW conveyor_jobs_all AS
    SELECT * FROM conveyor_jobs
    UNION ALL
    SELECT * FROM conveyor_jobs_history;
