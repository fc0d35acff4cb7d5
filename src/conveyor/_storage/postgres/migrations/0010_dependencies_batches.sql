-- Conveyor schema version 10 (PostgreSQL): job dependencies, workflows and batches.
-- A new state, 'pending': a job waiting on its dependencies, or a batch callback waiting
-- on its batch. None of the hot path's partial indexes (fetch, stage, lease) holds it.
ALTER TABLE conveyor_jobs DROP CONSTRAINT IF EXISTS conveyor_jobs_state_check;
ALTER TABLE conveyor_jobs ADD CONSTRAINT conveyor_jobs_state_check CHECK (state IN
    ('pending', 'scheduled', 'available', 'running', 'completed', 'retryable', 'cancelled',
     'discarded'));
-- the workflow this job belongs to, and the batch it counts in
ALTER TABLE conveyor_jobs ADD COLUMN IF NOT EXISTS workflow_id text;
ALTER TABLE conveyor_jobs ADD COLUMN IF NOT EXISTS batch_id bigint;
-- dependencies not final yet (a batch callback: 1 until its batch settles)
ALTER TABLE conveyor_jobs ADD COLUMN IF NOT EXISTS deps_pending integer NOT NULL DEFAULT 0;
-- true when a final state must settle something (dependents or a batch): the triggers
-- test it in their WHEN clause, so a job without followers pays nothing more.
ALTER TABLE conveyor_jobs ADD COLUMN IF NOT EXISTS followers boolean NOT NULL DEFAULT false;
-- the keyword argument that receives the dependencies' results on release (a chord)
ALTER TABLE conveyor_jobs ADD COLUMN IF NOT EXISTS results_arg text;
-- the batch this job is a callback of
ALTER TABLE conveyor_jobs ADD COLUMN IF NOT EXISTS callback_batch_id bigint;

-- The depth view counts pending jobs too (from the cold state index).
CREATE OR REPLACE VIEW conveyor_queue_depth AS
    SELECT queue, 'available' AS state, count(*) AS n FROM conveyor_jobs
    WHERE state = 'available' GROUP BY queue
    UNION ALL
    SELECT queue, 'running', count(*) FROM conveyor_jobs
    WHERE state = 'running' GROUP BY queue
    UNION ALL
    SELECT queue, state, count(*) FROM conveyor_jobs
    WHERE state IN ('pending', 'scheduled', 'retryable') AND state NOT IN ('available', 'running')
    GROUP BY queue, state;

CREATE INDEX IF NOT EXISTS conveyor_jobs_workflow_idx ON conveyor_jobs (workflow_id, id)
    WHERE workflow_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS conveyor_jobs_batch_idx ON conveyor_jobs (batch_id, id)
    WHERE batch_id IS NOT NULL;

-- One row per dependency edge: job_id waits on depends_on; on_failure is the policy
-- applied when depends_on ends discarded or cancelled; settled is set once the edge
-- counted (a dependency retried and finished again does not count twice).
CREATE TABLE IF NOT EXISTS conveyor_job_deps (
    job_id     bigint  NOT NULL,
    depends_on bigint  NOT NULL,
    on_failure text    NOT NULL DEFAULT 'cancel'
                       CHECK (on_failure IN ('cancel', 'run', 'run_with_failure')),
    settled    boolean NOT NULL DEFAULT false,
    PRIMARY KEY (job_id, depends_on)
);
CREATE INDEX IF NOT EXISTS conveyor_job_deps_depends_on_idx
    ON conveyor_job_deps (depends_on, job_id);

-- A batch: O(1) counters updated by each member's final state, and its callbacks
-- (pending jobs, stored at creation so that a crash cannot lose them).
CREATE TABLE IF NOT EXISTS conveyor_batches (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    open        boolean     NOT NULL DEFAULT true,
    total       integer     NOT NULL DEFAULT 0 CHECK (total >= 0),
    completed   integer     NOT NULL DEFAULT 0,
    discarded   integer     NOT NULL DEFAULT 0,
    cancelled   integer     NOT NULL DEFAULT 0,
    on_success  bigint,
    on_complete bigint,
    on_discard  bigint,
    created_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    meta        jsonb       NOT NULL DEFAULT '{}'
);

-- The NOTIFY channel: set per connection by Conveyor (conveyor.channel), else the default.
CREATE OR REPLACE FUNCTION conveyor_channel() RETURNS text LANGUAGE sql STABLE AS $$
    SELECT coalesce(nullif(current_setting('conveyor.channel', true), ''), 'conveyor_jobs')
$$;

-- Release (AFTER UPDATE OF deps_pending): a pending job whose last dependency settled
-- becomes available (or scheduled when its run_at is later); a chord's callback gets its
-- dependencies' results, in dependency id order. An AFTER trigger, not a BEFORE one: a
-- BEFORE ROW UPDATE trigger makes every UPDATE of the table lock each row first (claims,
-- acks and heartbeats included), whatever columns it changes.
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
            FROM conveyor_job_deps AS d JOIN conveyor_jobs AS x ON x.id = d.depends_on
            WHERE d.job_id = j.id)) END
    WHERE j.id = NEW.id AND j.state = 'pending';
    IF NEW.scheduled_at <= now() THEN
        PERFORM pg_notify(conveyor_channel(), NEW.queue);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER conveyor_jobs_release AFTER UPDATE OF deps_pending ON conveyor_jobs
    FOR EACH ROW WHEN (NEW.state = 'pending' AND NEW.deps_pending <= 0)
    EXECUTE FUNCTION conveyor_release();

-- Settle one job that became final (or was deleted before it was: a cancellation).
-- The UPDATEs lock each dependent and the batch row: when the last two dependencies of
-- a fan-in finish at once on two nodes, the second waits, then sees the first's count,
-- so exactly one of them releases it.
CREATE OR REPLACE FUNCTION conveyor_settle(job_id bigint, final_state text,
                                           member_of bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    b conveyor_batches%ROWTYPE;
BEGIN
    IF final_state <> 'completed' THEN
        UPDATE conveyor_jobs SET state = 'cancelled', finished_at = now()
        WHERE state = 'pending' AND id IN (
            SELECT d.job_id FROM conveyor_job_deps AS d
            WHERE d.depends_on = conveyor_settle.job_id AND NOT d.settled
              AND d.on_failure = 'cancel'
            ORDER BY d.job_id);
    END IF;
    UPDATE conveyor_jobs SET deps_pending = deps_pending - 1
    WHERE state = 'pending' AND id IN (
        SELECT d.job_id FROM conveyor_job_deps AS d
        WHERE d.depends_on = conveyor_settle.job_id AND NOT d.settled ORDER BY d.job_id);
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

CREATE OR REPLACE FUNCTION conveyor_jobs_settle() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM conveyor_settle(OLD.id, 'cancelled', OLD.batch_id);
        RETURN OLD;
    END IF;
    IF NEW.state IN ('completed', 'cancelled', 'discarded') THEN
        PERFORM conveyor_settle(NEW.id, NEW.state, NEW.batch_id);
    ELSIF NEW.batch_id IS NOT NULL THEN  -- a retried member left its final state
        UPDATE conveyor_batches
        SET completed = completed - (OLD.state = 'completed')::int,
            discarded = discarded - (OLD.state = 'discarded')::int,
            cancelled = cancelled - (OLD.state = 'cancelled')::int
        WHERE id = NEW.batch_id;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER conveyor_jobs_settle AFTER UPDATE OF state ON conveyor_jobs
    FOR EACH ROW WHEN (NEW.followers
        AND (NEW.state IN ('completed', 'cancelled', 'discarded'))
            <> (OLD.state IN ('completed', 'cancelled', 'discarded')))
    EXECUTE FUNCTION conveyor_jobs_settle();
CREATE TRIGGER conveyor_jobs_settle_deleted AFTER DELETE ON conveyor_jobs
    FOR EACH ROW WHEN (OLD.followers
        AND OLD.state NOT IN ('completed', 'cancelled', 'discarded'))
    EXECUTE FUNCTION conveyor_jobs_settle();

-- A closed batch whose every job is final finishes once (AFTER UPDATE of its row, which
-- the member's write holds locked): on_complete runs, on_success runs when every job
-- completed (else it is cancelled), an unused on_discard is cancelled.
CREATE OR REPLACE FUNCTION conveyor_batches_finish() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE conveyor_batches SET finished_at = now()
    WHERE id = NEW.id AND finished_at IS NULL;
    UPDATE conveyor_jobs SET deps_pending = 0
    WHERE state = 'pending' AND (id = NEW.on_complete
                                 OR (id = NEW.on_success AND NEW.completed >= NEW.total));
    UPDATE conveyor_jobs SET state = 'cancelled', finished_at = now()
    WHERE state = 'pending' AND (id = NEW.on_discard
                                 OR (id = NEW.on_success AND NEW.completed < NEW.total));
    RETURN NULL;
END
$$;
CREATE TRIGGER conveyor_batches_finish AFTER UPDATE ON conveyor_batches
    FOR EACH ROW WHEN (NEW.finished_at IS NULL AND NOT NEW.open
                       AND NEW.completed + NEW.discarded + NEW.cancelled >= NEW.total)
    EXECUTE FUNCTION conveyor_batches_finish();
