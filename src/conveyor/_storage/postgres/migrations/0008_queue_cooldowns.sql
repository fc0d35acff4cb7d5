-- Conveyor schema version 8 (PostgreSQL): cluster-wide queue cool-downs.
--
-- A handler that raises Throttle(retry_after=..., scope="queue") cools its whole queue
-- down: every worker reads this table (a few rows, one per queue ever throttled) and
-- stops claiming from the queue until cool_until (database clock). ``seconds`` is the
-- length of the current cool-down and ``streak`` how many cool-downs followed each
-- other; both grow while the queue keeps being throttled (see queue_cooldown_raise in
-- sql/cooldown.sql).
CREATE TABLE IF NOT EXISTS conveyor_queue_cooldowns (
    queue      text             PRIMARY KEY CHECK (length(queue) BETWEEN 1 AND 100),
    cool_until timestamptz      NOT NULL,
    seconds    double precision NOT NULL CHECK (seconds >= 0),
    streak     integer          NOT NULL DEFAULT 1 CHECK (streak >= 1),
    raised_at  timestamptz      NOT NULL
);
