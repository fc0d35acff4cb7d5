-- Metric rollups, PostgreSQL dialect. Workers add what they measured since their last
-- flush: values are added to the row of their key, so any number of nodes share rows.
-- Rows arrive sorted by key, so concurrent flushes lock rows in the same order.

-- name: metrics_add
INSERT INTO conveyor_metrics AS m (bucket, queue, task, metric, value)
SELECT to_timestamp(r.bucket), r.queue, r.task, r.metric, r.value
FROM unnest(%(bucket)s::float8[], %(queue)s::text[], %(task)s::text[], %(metric)s::text[],
            %(value)s::float8[]) AS r(bucket, queue, task, metric, value)
ORDER BY r.bucket, r.queue, r.task, r.metric
ON CONFLICT (bucket, queue, task, metric) DO UPDATE SET value = m.value + excluded.value;

-- name: metrics_total_add
INSERT INTO conveyor_metrics_totals AS t (queue, task, metric, value, updated_at)
SELECT r.queue, r.task, r.metric, r.value, now()
FROM unnest(%(queue)s::text[], %(task)s::text[], %(metric)s::text[], %(value)s::float8[])
     AS r(queue, task, metric, value)
ORDER BY r.queue, r.task, r.metric
ON CONFLICT (queue, task, metric) DO UPDATE
SET value = t.value + excluded.value, updated_at = excluded.updated_at;

-- name: metrics_series
-- Minutes summed into ``step``-second buckets (aligned on the epoch), per queue or, with
-- ``merged``, for all queues as '*': a chart's points are aggregated here, never in Python.
SELECT floor(extract(epoch FROM bucket)::float8 / %(step)s::float8) * %(step)s::float8 AS bucket,
       CASE WHEN %(merged)s::boolean THEN '*' ELSE queue END AS queue, metric,
       sum(value) AS value
FROM conveyor_metrics
WHERE bucket >= to_timestamp(%(since)s) AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
GROUP BY 1, 2, metric
ORDER BY 1;

-- name: metrics_totals
SELECT queue, task, metric, value FROM conveyor_metrics_totals ORDER BY queue, task, metric;

-- name: metrics_depth_sample
-- One sample per minute is kept; a later sample of the same minute replaces it.
WITH per_queue AS MATERIALIZED (SELECT queue, state, n FROM conveyor_queue_depth)
INSERT INTO conveyor_metrics_depth AS d (bucket, queue, state, n)
SELECT to_timestamp(%(bucket)s), c.queue, c.state, c.n
FROM (
    SELECT q.queue, q.state, q.n FROM per_queue AS q
    UNION ALL
    SELECT '*', s.state, coalesce((SELECT sum(q.n) FROM per_queue AS q
                                   WHERE q.state = s.state), 0)
    FROM (VALUES ('scheduled'), ('available'), ('running'), ('retryable')) AS s(state)
) AS c
ON CONFLICT (bucket, queue, state) DO UPDATE SET n = excluded.n;

-- name: metrics_depth_series
-- The per-minute samples, each ``step``-second bucket showing its peak.
SELECT floor(extract(epoch FROM bucket)::float8 / %(step)s::float8) * %(step)s::float8 AS bucket,
       queue, state, max(n) AS n
FROM conveyor_metrics_depth
WHERE bucket >= to_timestamp(%(since)s) AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
GROUP BY 1, queue, state
ORDER BY 1;

-- name: metrics_prune
DELETE FROM conveyor_metrics WHERE bucket < to_timestamp(%(before)s);

-- name: metrics_depth_prune
DELETE FROM conveyor_metrics_depth WHERE bucket < to_timestamp(%(before)s);
