-- The worker node that ran a job's latest attempt, and how long that attempt ran (seconds,
-- measured by the worker). Failed attempts carry the same in their entry of ``errors``.
ALTER TABLE conveyor_jobs ADD COLUMN IF NOT EXISTS ran_on text;
ALTER TABLE conveyor_jobs ADD COLUMN IF NOT EXISTS run_time double precision;
