-- Cluster-wide queue cool-downs (Throttle(scope="queue")), PostgreSQL dialect.

-- name: queue_cooldown_raise
-- One Throttle(scope="queue") of :seconds on :queue. The growth rule:
--   * quiet (no cool-down, or the last one ended more than its own length ago):
--     a cool-down of :seconds starts, streak 1;
--   * throttled again within one cool-down length after the last one ended: the
--     length doubles (at least :seconds, at most max(:cap, :seconds)), streak + 1;
--   * raised while the queue is still cooling (jobs claimed before it began): no
--     growth, the end moves out only if now + :seconds is later.
INSERT INTO conveyor_queue_cooldowns AS c (queue, cool_until, seconds, streak, raised_at)
VALUES (%(queue)s, now() + make_interval(secs => %(seconds)s::float8), %(seconds)s::float8,
        1, now())
ON CONFLICT (queue) DO UPDATE SET
    seconds = CASE
        WHEN excluded.raised_at < c.cool_until THEN greatest(c.seconds, excluded.seconds)
        WHEN excluded.raised_at <= c.cool_until + make_interval(secs => c.seconds)
            THEN least(greatest(excluded.seconds, 2 * c.seconds),
                       greatest(%(cap)s::float8, excluded.seconds))
        ELSE excluded.seconds END,
    streak = CASE
        WHEN excluded.raised_at < c.cool_until THEN c.streak
        WHEN excluded.raised_at <= c.cool_until + make_interval(secs => c.seconds)
            THEN c.streak + 1
        ELSE 1 END,
    cool_until = CASE
        WHEN excluded.raised_at < c.cool_until THEN greatest(c.cool_until, excluded.cool_until)
        WHEN excluded.raised_at <= c.cool_until + make_interval(secs => c.seconds)
            THEN excluded.raised_at + make_interval(secs => least(
                greatest(excluded.seconds, 2 * c.seconds),
                greatest(%(cap)s::float8, excluded.seconds)))
        ELSE excluded.cool_until END,
    raised_at = excluded.raised_at
RETURNING queue, cool_until, seconds, streak, raised_at,
          extract(epoch FROM cool_until - raised_at)::float8 AS remaining;

-- name: queue_cooldown_list
-- Every queue's cool-down with what remains of it now (negative once it ended).
SELECT queue, cool_until, seconds, streak, raised_at,
       extract(epoch FROM cool_until - now())::float8 AS remaining
FROM conveyor_queue_cooldowns ORDER BY queue;

-- name: queue_cooldown_clear
DELETE FROM conveyor_queue_cooldowns WHERE queue = %(queue)s RETURNING queue;
