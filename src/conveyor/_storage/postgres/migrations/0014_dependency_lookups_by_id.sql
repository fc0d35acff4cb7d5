-- Conveyor schema version 14 (PostgreSQL): dependency lookups by id, whatever the
-- statistics. The triggers reach one dependent with WHERE id = ... AND state = 'pending'.
-- On statistics taken while no job was pending (a queue that ran only plain jobs), the
-- planner sent those lookups through the partial state index, which walks every pending
-- entry to find one id: a completion cost more the more jobs were pending (a 10 x 1,000
-- DAG drained in 10.6 s instead of 2.1 s; bench/analysis.md). Written state || '', the
-- state test can use no index, so the primary key finds the row and the state is checked
-- on it. The functions are otherwise schema 13's (release, settle) and schema 10's
-- (batch finish).

CREATE OR REPLACE FUNCTION conveyor_release() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE conveyor_jobs AS j
    SET state = CASE WHEN j.scheduled_at > now() THEN 'scheduled' ELSE 'available' END,
        kwargs = CASE WHEN j.results_arg IS NULL THEN j.kwargs
                      ELSE j.kwargs || jsonb_build_object(j.results_arg, (
            SELECT coalesce(jsonb_agg(CASE
                       WHEN x.state = 'completed' THEN coalesce(x.result, 'null'::jsonb)
                       WHEN d.on_failure = 'run_with_failure' THEN jsonb_build_object(
                           'job_id', x.id, 'state', x.state, 'error', x.errors -> -1)
                       ELSE 'null'::jsonb END ORDER BY d.depends_on), '[]'::jsonb)
            FROM conveyor_job_deps AS d JOIN (
                SELECT id, state, result, errors FROM conveyor_jobs
                WHERE id = ANY(ARRAY(SELECT depends_on FROM conveyor_job_deps WHERE job_id = NEW.id))
                UNION ALL
                SELECT id, state, result, errors FROM conveyor_jobs_history
                WHERE id = ANY(ARRAY(SELECT depends_on FROM conveyor_job_deps WHERE job_id = NEW.id))
            ) AS x ON x.id = d.depends_on
            WHERE d.job_id = j.id)) END
    WHERE j.id = NEW.id AND j.state || '' = 'pending';
    IF NEW.scheduled_at <= now() THEN
        PERFORM pg_notify(conveyor_channel(), NEW.queue);
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION conveyor_settle(job_id bigint, final_state text,
                                           member_of bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    b conveyor_batches%ROWTYPE;
    edge record;
BEGIN
    FOR edge IN
        SELECT d.job_id, d.on_failure FROM conveyor_job_deps AS d
        WHERE d.depends_on = conveyor_settle.job_id AND NOT d.settled ORDER BY d.job_id
    LOOP
        IF final_state <> 'completed' AND edge.on_failure = 'cancel' THEN
            UPDATE conveyor_jobs SET state = 'cancelled', finished_at = now()
            WHERE id = edge.job_id AND state || '' = 'pending';
        END IF;
        UPDATE conveyor_jobs SET deps_pending = deps_pending - 1
        WHERE id = edge.job_id AND state || '' = 'pending';
    END LOOP;
    UPDATE conveyor_job_deps AS d SET settled = true
    WHERE d.depends_on = conveyor_settle.job_id AND NOT d.settled;
    IF member_of IS NOT NULL THEN
        UPDATE conveyor_batches
        SET completed = completed + (final_state = 'completed')::int,
            discarded = discarded + (final_state = 'discarded')::int,
            cancelled = cancelled + (final_state = 'cancelled')::int
        WHERE id = member_of RETURNING * INTO b;
        IF final_state = 'discarded' AND b.on_discard IS NOT NULL THEN
            UPDATE conveyor_jobs SET deps_pending = 0
            WHERE id = b.on_discard AND state || '' = 'pending';
        END IF;
    END IF;
END
$$;

-- A batch's callbacks by id as well (schema 10's finish, otherwise unchanged).
CREATE OR REPLACE FUNCTION conveyor_batches_finish() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE conveyor_batches SET finished_at = now()
    WHERE id = NEW.id AND finished_at IS NULL;
    UPDATE conveyor_jobs SET deps_pending = 0
    WHERE state || '' = 'pending' AND id IN (NEW.on_complete,
        CASE WHEN NEW.completed >= NEW.total THEN NEW.on_success END);
    UPDATE conveyor_jobs SET state = 'cancelled', finished_at = now()
    WHERE state || '' = 'pending' AND id IN (NEW.on_discard,
        CASE WHEN NEW.completed < NEW.total THEN NEW.on_success END);
    RETURN NULL;
END
$$;
