-- Conveyor schema version 16 (SQLite): limiters used inside handlers and outside jobs
-- (app.limiter). A rate limiter keeps its GCRA cell in conveyor_rate_limits (keys
-- "limiter:NAME[:KEY]"); a concurrency limiter leases slots here, one row per holder,
-- each good until lease_expires_at (unix seconds on the database clock): a holder that
-- dies stops renewing and its slot frees itself. conveyor_limiters records what each
-- limiter was declared as, for the CLI and the dashboard.
CREATE TABLE IF NOT EXISTS conveyor_limiters (
    name        TEXT    PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 100),
    rate        TEXT,
    concurrency INTEGER CHECK (concurrency IS NULL OR concurrency >= 1),
    lease       REAL    NOT NULL CHECK (lease > 0),
    updated_at  REAL    NOT NULL
);

CREATE TABLE IF NOT EXISTS conveyor_limiter_slots (
    name             TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    key              TEXT NOT NULL CHECK (length(key) <= 500),
    holder           TEXT NOT NULL CHECK (length(holder) BETWEEN 1 AND 200),
    acquired_at      REAL NOT NULL,
    lease_expires_at REAL NOT NULL,
    PRIMARY KEY (name, key, holder)
);
