-- Per-queue defaults set live by operators: the backoff of failed attempts (a spec such
-- as '30' or 'exp:5:3600', used when the task sets none) and the retention of finished
-- jobs (seconds; NULL: the pruning worker's own --completed/--discarded-retention).
ALTER TABLE conveyor_queues ADD COLUMN backoff TEXT;
ALTER TABLE conveyor_queues ADD COLUMN completed_retention REAL
    CHECK (completed_retention IS NULL OR completed_retention >= 0);
ALTER TABLE conveyor_queues ADD COLUMN discarded_retention REAL
    CHECK (discarded_retention IS NULL OR discarded_retention >= 0);
-- Who a node is: operator labels (--label k=v, a JSON object) and the app's version.
ALTER TABLE conveyor_nodes ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';
ALTER TABLE conveyor_nodes ADD COLUMN version TEXT;
