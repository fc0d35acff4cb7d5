-- History (conveyor_jobs_history), SQLite dialect: the archiver's moves, the way back
-- for a retry, deletes that reach finished jobs, retention (by row: no partitions).
-- A move is one write transaction of three statements: pick, copy, delete; both tables
-- have the same columns in the same order, so rows move with SELECT *.

-- name: job_archive_rule
-- THE archiving rule, the one place it is written: which finished row may leave the hot
-- table, {state} being its final state. Not while it holds a unique claim (its
-- unique_states name its final state: the unique index lives on the hot table, so it
-- stays until pruned). Placed as {job_archive_rule:EXPR} (schema.py) in the archiver's
-- pick and in job_ack_retire (jobs_plain.sql), which moves a plain completion at its ack.
-- Extend it here, in both dialects, when another column must keep a row hot.
(unique_key IS NULL OR instr(coalesce(unique_states, ''), ',' || {state} || ',') = 0)

-- name: job_archive_pick
-- A finished job older than :after seconds that the archiving rule lets go.
SELECT id FROM conveyor_jobs
WHERE state IN ('completed', 'cancelled', 'discarded') AND state NOT IN ('available', 'running')
  AND finished_at <= (julianday('now') - 2440587.5) * 86400.0 - :after
  AND {job_archive_rule:state}
LIMIT :limit;

-- name: job_archive_copy
INSERT INTO conveyor_jobs_history
SELECT * FROM conveyor_jobs WHERE id IN (SELECT value FROM json_each(:ids));

-- name: job_archive_delete
DELETE FROM conveyor_jobs WHERE id IN (SELECT value FROM json_each(:ids));

-- name: job_history_pick
-- Jobs of history by id: the first step of moving them back (a retry).
SELECT id, task, queue, state, attempt FROM conveyor_jobs_history
WHERE id IN (SELECT value FROM json_each(:ids));

-- name: job_history_pick_matching
-- As job_pick_matching (search.sql), on history: the finished jobs a bulk retry moves back.
SELECT j.id, j.task, j.queue, j.state, j.attempt FROM conveyor_jobs_history AS j
WHERE instr(:allowed, ',' || j.state || ',') > 0
  AND (:states IS NULL OR instr(:states, ',' || j.state || ',') > 0)
  AND (:queue IS NULL OR j.queue = :queue)
  AND (:task IS NULL OR j.task = :task)
  AND (:tag IS NULL OR EXISTS (SELECT 1 FROM json_each(j.tags) AS t WHERE t.value = :tag))
  AND (:text IS NULL OR instr(lower(j.args || ' ' || j.kwargs), lower(:text)) > 0)
  AND (:error_key IS NULL OR substr(coalesce(json_extract(j.errors, '$[#-1].error'), ''), 1,
                  CASE WHEN instr(coalesce(json_extract(j.errors, '$[#-1].error'), ''), char(10)) BETWEEN 1 AND 201
                       THEN instr(coalesce(json_extract(j.errors, '$[#-1].error'), ''), char(10)) - 1 ELSE 200 END) = :error_key)
  AND (:ids IS NULL OR j.id IN (SELECT value FROM json_each(:ids)))
  AND j.id >= coalesce(:min_id, 0)
  AND j.id <= coalesce(:max_id, 9223372036854775807)
ORDER BY j.id
LIMIT :limit;

-- name: job_history_restore
-- Back into the hot table with its own id.
INSERT INTO conveyor_jobs
SELECT * FROM conveyor_jobs_history WHERE id IN (SELECT value FROM json_each(:ids));

-- name: job_history_delete
DELETE FROM conveyor_jobs_history WHERE id IN (SELECT value FROM json_each(:ids))
RETURNING *;

-- name: job_history_purge_ids
-- As job_purge_ids (maintenance.sql), on history.
DELETE FROM conveyor_jobs_history
WHERE id IN (SELECT value FROM json_each(:ids))
  AND instr(:states, ',' || state || ',') > 0
  AND (:queue IS NULL OR queue = :queue)
  AND (:task IS NULL OR task = :task)
  AND (:older_than IS NULL OR coalesce(finished_at, created_at)
       < (julianday('now') - 2440587.5) * 86400.0 - :older_than)
RETURNING id, task, queue, state, attempt;

-- name: job_history_prune
-- As job_prune (control.sql), on history. History's only index on finished_at has no
-- state column, so the first condition bounds the search to rows past the shorter age
-- and "+state" keeps the planner off state_idx: through that index every pass read
-- every finished row of history (seconds per pass on a large file, holding the write
-- lock) to find none old enough.
DELETE FROM conveyor_jobs_history
WHERE id IN (
    SELECT id FROM conveyor_jobs_history
    WHERE finished_at < (julianday('now') - 2440587.5) * 86400.0
                        - min(:completed_age, :discarded_age)
      AND ((+state IN ('completed', 'cancelled')
            AND finished_at < (julianday('now') - 2440587.5) * 86400.0 - :completed_age)
        OR (+state = 'discarded'
            AND finished_at < (julianday('now') - 2440587.5) * 86400.0 - :discarded_age))
      AND (:queue IS NULL OR queue = :queue)
      AND (:queue IS NOT NULL OR queue NOT IN (SELECT value FROM json_each(:exclude)))
    LIMIT :limit
)
RETURNING id;

-- name: job_history_drop
-- SQLite has no partitions: history is pruned by row (job_history_prune). Nothing to drop.
SELECT 0 AS n WHERE :completed_age IS NOT NULL OR :discarded_age IS NOT NULL;

-- name: job_history_prepare
-- SQLite has no partitions to make ahead.
SELECT 0 AS n WHERE :days IS NOT NULL;
