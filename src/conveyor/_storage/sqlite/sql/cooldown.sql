-- Cluster-wide queue cool-downs (Throttle(scope="queue")), SQLite dialect.
-- Times are unix seconds on the database clock.

-- name: queue_cooldown_raise
-- One Throttle(scope="queue") of :seconds on :queue. The growth rule:
--   * quiet (no cool-down, or the last one ended more than its own length ago):
--     a cool-down of :seconds starts, streak 1;
--   * throttled again within one cool-down length after the last one ended: the
--     length doubles (at least :seconds, at most max(:cap, :seconds)), streak + 1;
--   * raised while the queue is still cooling (jobs claimed before it began): no
--     growth, the end moves out only if now + :seconds is later.
INSERT INTO conveyor_queue_cooldowns (queue, cool_until, seconds, streak, raised_at)
SELECT :queue, now + :seconds, :seconds, 1, now
FROM (SELECT (julianday('now') - 2440587.5) * 86400.0 AS now)
WHERE true
ON CONFLICT (queue) DO UPDATE SET
    seconds = CASE
        WHEN excluded.raised_at < conveyor_queue_cooldowns.cool_until
            THEN max(conveyor_queue_cooldowns.seconds, excluded.seconds)
        WHEN excluded.raised_at <= conveyor_queue_cooldowns.cool_until
                                   + conveyor_queue_cooldowns.seconds
            THEN min(max(excluded.seconds, 2 * conveyor_queue_cooldowns.seconds),
                     max(:cap, excluded.seconds))
        ELSE excluded.seconds END,
    streak = CASE
        WHEN excluded.raised_at < conveyor_queue_cooldowns.cool_until
            THEN conveyor_queue_cooldowns.streak
        WHEN excluded.raised_at <= conveyor_queue_cooldowns.cool_until
                                   + conveyor_queue_cooldowns.seconds
            THEN conveyor_queue_cooldowns.streak + 1
        ELSE 1 END,
    cool_until = CASE
        WHEN excluded.raised_at < conveyor_queue_cooldowns.cool_until
            THEN max(conveyor_queue_cooldowns.cool_until, excluded.cool_until)
        WHEN excluded.raised_at <= conveyor_queue_cooldowns.cool_until
                                   + conveyor_queue_cooldowns.seconds
            THEN excluded.raised_at
                 + min(max(excluded.seconds, 2 * conveyor_queue_cooldowns.seconds),
                       max(:cap, excluded.seconds))
        ELSE excluded.cool_until END,
    raised_at = excluded.raised_at
RETURNING queue, cool_until, seconds, streak, raised_at, cool_until - raised_at AS remaining;

-- name: queue_cooldown_list
-- Every queue's cool-down with what remains of it now (negative once it ended).
SELECT queue, cool_until, seconds, streak, raised_at,
       cool_until - (julianday('now') - 2440587.5) * 86400.0 AS remaining
FROM conveyor_queue_cooldowns ORDER BY queue;

-- name: queue_cooldown_clear
DELETE FROM conveyor_queue_cooldowns WHERE queue = :queue RETURNING queue;
