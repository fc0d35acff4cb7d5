-- Conveyor schema version 16 (PostgreSQL): limiters used inside handlers and outside
-- jobs (app.limiter). A rate limiter keeps its GCRA cell in conveyor_rate_limits (keys
-- "limiter:NAME[:KEY]"); a concurrency limiter leases slots here, one row per holder,
-- each good until lease_expires_at (database clock): a holder that dies stops renewing
-- and its slot frees itself. Grants are serialised per (name, key) by an advisory lock
-- (limiter_slot_lock). conveyor_limiters records what each limiter was declared as,
-- for the CLI and the dashboard.
CREATE TABLE IF NOT EXISTS conveyor_limiters (
    name        text             PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 100),
    rate        text,
    concurrency integer          CHECK (concurrency IS NULL OR concurrency >= 1),
    lease       double precision NOT NULL CHECK (lease > 0),
    updated_at  timestamptz      NOT NULL
);

CREATE TABLE IF NOT EXISTS conveyor_limiter_slots (
    name             text        NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    key              text        NOT NULL CHECK (length(key) <= 500),
    holder           text        NOT NULL CHECK (length(holder) BETWEEN 1 AND 200),
    acquired_at      timestamptz NOT NULL,
    lease_expires_at timestamptz NOT NULL,
    PRIMARY KEY (name, key, holder)
);
