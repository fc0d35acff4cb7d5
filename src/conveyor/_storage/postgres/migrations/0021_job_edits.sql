-- Conveyor schema version 21 (PostgreSQL): operators' edits of a job's arguments
-- (edit and retry: app.retry_job(id, args=..., kwargs=...), `conveyor jobs retry ID
-- --args`, the dashboard's form). One row per edit, with what the arguments were and
-- who asked; the job page's timeline reads them. The job's own row and its history
-- copy stay as they were shaped: an edit adds no column to the hot table. Edits of jobs
-- that no longer exist are deleted by the pruner.
CREATE TABLE IF NOT EXISTS conveyor_job_edits (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        bigint      NOT NULL,
    at            timestamptz NOT NULL DEFAULT now(),
    -- the interface that asked (api, cli, dashboard) and the dashboard user, if any
    source        text        NOT NULL CHECK (length(source) BETWEEN 1 AND 100),
    actor         text        CHECK (actor IS NULL OR length(actor) BETWEEN 1 AND 200),
    args_before   jsonb       NOT NULL,
    kwargs_before jsonb       NOT NULL,
    args          jsonb       NOT NULL,
    kwargs        jsonb       NOT NULL
);
CREATE INDEX IF NOT EXISTS conveyor_job_edits_job_idx ON conveyor_job_edits (job_id, id);
