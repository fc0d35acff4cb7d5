-- Per-queue defaults set live by operators: the backoff of failed attempts (a spec such
-- as '30' or 'exp:5:3600', used when the task sets none) and the retention of finished
-- jobs (seconds; NULL: the pruning worker's own --completed/--discarded-retention).
ALTER TABLE conveyor_queues ADD COLUMN IF NOT EXISTS backoff text;
ALTER TABLE conveyor_queues ADD COLUMN IF NOT EXISTS completed_retention double precision
    CHECK (completed_retention IS NULL OR completed_retention >= 0);
ALTER TABLE conveyor_queues ADD COLUMN IF NOT EXISTS discarded_retention double precision
    CHECK (discarded_retention IS NULL OR discarded_retention >= 0);
-- Who a node is: operator labels (--label k=v) and the app's version.
ALTER TABLE conveyor_nodes ADD COLUMN IF NOT EXISTS labels jsonb NOT NULL DEFAULT '{}';
ALTER TABLE conveyor_nodes ADD COLUMN IF NOT EXISTS version text;
