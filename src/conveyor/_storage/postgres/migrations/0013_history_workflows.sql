-- Conveyor schema version 13 (PostgreSQL): workflows and batches across the archive.
-- Finished jobs move to conveyor_jobs_history (schema 12), workflow members and
-- dependencies included; these make their reads and a chord's release find them there.
-- Workflow and batch reads find archived members: indexes like the hot table's.
CREATE INDEX IF NOT EXISTS conveyor_jobs_history_workflow_idx
    ON conveyor_jobs_history (workflow_id, id) WHERE workflow_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS conveyor_jobs_history_batch_idx
    ON conveyor_jobs_history (batch_id, id) WHERE batch_id IS NOT NULL;

-- A chord's callback is released when its last dependency settles; the others may have
-- been archived by then: their results are read from both tables, each by its id index
-- (schema 10's release, otherwise unchanged).
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
    WHERE j.id = NEW.id AND j.state = 'pending';
    IF NEW.scheduled_at <= now() THEN
        PERFORM pg_notify(conveyor_channel(), NEW.queue);
    END IF;
    RETURN NULL;
END
$$;

-- Settle, dependent by dependent through the primary key: as one UPDATE ... WHERE id IN
-- (the edges), the planner hash-joined the edges against every pending job, so a
-- completion cost more the more jobs were pending (bench w9_workflow_dag: 10 layers of
-- 1,000 drained in 51.5 s, 5.9 s this way). Schema 10's settle, otherwise unchanged.
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
            WHERE id = edge.job_id AND state = 'pending';
        END IF;
        UPDATE conveyor_jobs SET deps_pending = deps_pending - 1
        WHERE id = edge.job_id AND state = 'pending';
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
            WHERE id = b.on_discard AND state = 'pending';
        END IF;
    END IF;
END
$$;
