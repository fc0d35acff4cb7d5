-- Conveyor schema version 15 (PostgreSQL): a fan-in's release reads its dependencies'
-- results one by one, each by its id (the hot table's primary key, history's id index).
-- Schemas 13 and 14 joined the edges to one scan of both tables; on the column
-- statistics of an earlier load, where every job had one dependency (TRUNCATE keeps
-- them), the planner expected one edge, looped over the edges and rescanned history for
-- each: a fan-in of 10,000 whose members were archived read 10,000 x
-- 10,000 rows and held its dependencies' acks for minutes (bench, completion cost).
-- Otherwise schema 14's release.
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
            FROM conveyor_job_deps AS d CROSS JOIN LATERAL (
                SELECT id, state, result, errors FROM conveyor_jobs WHERE id = d.depends_on
                UNION ALL
                SELECT id, state, result, errors FROM conveyor_jobs_history
                WHERE id = d.depends_on
                LIMIT 1) AS x
            WHERE d.job_id = j.id)) END
    WHERE j.id = NEW.id AND j.state || '' = 'pending';
    IF NEW.scheduled_at <= now() THEN
        PERFORM pg_notify(conveyor_channel(), NEW.queue);
    END IF;
    RETURN NULL;
END
$$;
