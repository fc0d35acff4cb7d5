-- Metric rollups, SQLite dialect. Workers add what they measured since their last
-- flush: values are added to the row of their key, so several processes share rows.
-- Buckets are unix seconds at the start of a minute.

-- name: metrics_add
INSERT INTO conveyor_metrics (bucket, queue, task, metric, value)
VALUES (:bucket, :queue, :task, :metric, :value)
ON CONFLICT (bucket, queue, task, metric) DO UPDATE SET value = value + excluded.value;

-- name: metrics_total_add
INSERT INTO conveyor_metrics_totals (queue, task, metric, value, updated_at)
VALUES (:queue, :task, :metric, :value, (julianday('now') - 2440587.5) * 86400.0)
ON CONFLICT (queue, task, metric) DO UPDATE
SET value = value + excluded.value, updated_at = excluded.updated_at;

-- name: metrics_series
-- Minutes summed into :step-second buckets (aligned on the epoch), per queue or, with
-- :merged, for all queues as '*': a chart's points are aggregated here, never in Python.
SELECT CAST(bucket / :step AS INTEGER) * :step AS bucket,
       CASE WHEN :merged THEN '*' ELSE queue END AS queue, metric, sum(value) AS value
FROM conveyor_metrics
WHERE bucket >= :since AND (:queue IS NULL OR queue = :queue)
  AND (:task IS NULL OR task = :task)
GROUP BY 1, 2, metric
ORDER BY 1;

-- name: metrics_totals
SELECT queue, task, metric, value FROM conveyor_metrics_totals ORDER BY queue, task, metric;

-- name: metrics_depth_sample
-- One sample per minute is kept; a later sample of the same minute replaces it.
INSERT INTO conveyor_metrics_depth (bucket, queue, state, n)
WITH per_queue AS (SELECT queue, state, n FROM conveyor_queue_depth)
SELECT :bucket, c.queue, c.state, c.n
FROM (
    SELECT q.queue, q.state, q.n FROM per_queue AS q
    UNION ALL
    SELECT '*', s.state, coalesce((SELECT sum(q.n) FROM per_queue AS q
                                   WHERE q.state = s.state), 0)
    FROM (SELECT 'scheduled' AS state UNION ALL SELECT 'available'
          UNION ALL SELECT 'running' UNION ALL SELECT 'retryable') AS s
) AS c
WHERE true
ON CONFLICT (bucket, queue, state) DO UPDATE SET n = excluded.n;

-- name: metrics_depth_series
-- The per-minute samples, each :step-second bucket showing its peak.
SELECT CAST(bucket / :step AS INTEGER) * :step AS bucket, queue, state, max(n) AS n
FROM conveyor_metrics_depth
WHERE bucket >= :since AND (:queue IS NULL OR queue = :queue)
GROUP BY 1, queue, state
ORDER BY 1;

-- name: metrics_prune
DELETE FROM conveyor_metrics WHERE bucket < :before;

-- name: metrics_depth_prune
DELETE FROM conveyor_metrics_depth WHERE bucket < :before;
