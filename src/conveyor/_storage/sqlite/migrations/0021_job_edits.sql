-- Conveyor schema version 21 (SQLite): operators' edits of a job's arguments (edit and
-- retry). One row per edit, with what the arguments were and who asked; the job page's
-- timeline reads them. Edits of jobs that no longer exist are deleted by the pruner.
CREATE TABLE IF NOT EXISTS conveyor_job_edits (
    id            INTEGER PRIMARY KEY,
    job_id        INTEGER NOT NULL,
    at            REAL    NOT NULL,
    source        TEXT    NOT NULL CHECK (length(source) BETWEEN 1 AND 100),
    actor         TEXT    CHECK (actor IS NULL OR length(actor) BETWEEN 1 AND 200),
    args_before   TEXT    NOT NULL,
    kwargs_before TEXT    NOT NULL,
    args          TEXT    NOT NULL,
    kwargs        TEXT    NOT NULL
);
CREATE INDEX IF NOT EXISTS conveyor_job_edits_job_idx ON conveyor_job_edits (job_id, id);
