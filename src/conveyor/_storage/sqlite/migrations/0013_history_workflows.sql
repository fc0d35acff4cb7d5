-- Conveyor schema version 13 (SQLite): workflows and batches across the archive.
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
DROP TRIGGER IF EXISTS conveyor_jobs_release;
CREATE TRIGGER IF NOT EXISTS conveyor_jobs_release AFTER UPDATE OF deps_pending ON conveyor_jobs
WHEN NEW.state = 'pending' AND NEW.deps_pending <= 0
BEGIN
    UPDATE conveyor_jobs
    SET state = CASE WHEN scheduled_at > (julianday('now') - 2440587.5) * 86400.0
                     THEN 'scheduled' ELSE 'available' END,
        kwargs = CASE WHEN results_arg IS NULL THEN kwargs ELSE json_set(kwargs,
            '$."' || results_arg || '"',
            (SELECT json_group_array(json(r.value)) FROM (
                SELECT CASE WHEN x.state = 'completed' THEN coalesce(x.result, 'null')
                            WHEN d.on_failure = 'run_with_failure' THEN json_object(
                                'job_id', x.id, 'state', x.state,
                                'error', json_extract(x.errors, '$[#-1]'))
                            ELSE 'null' END AS value
                FROM conveyor_job_deps AS d JOIN (
                    SELECT id, state, result, errors FROM conveyor_jobs WHERE id IN (
                        SELECT depends_on FROM conveyor_job_deps WHERE job_id = NEW.id)
                    UNION ALL
                    SELECT id, state, result, errors FROM conveyor_jobs_history WHERE id IN (
                        SELECT depends_on FROM conveyor_job_deps WHERE job_id = NEW.id)
                ) AS x ON x.id = d.depends_on
                WHERE d.job_id = NEW.id ORDER BY d.depends_on) AS r)) END
    WHERE id = NEW.id;
END;
