-- Limiters (app.limiter), SQLite dialect. Times are unix seconds on the database clock.
-- Every write runs in its own IMMEDIATE transaction: SQLite's write lock serialises the
-- grants of every process sharing the file, so a count and the insert it allows are
-- one step.

-- name: limiter_declare
INSERT INTO conveyor_limiters (name, rate, concurrency, lease, updated_at)
VALUES (:name, :rate, :concurrency, :lease, (julianday('now') - 2440587.5) * 86400.0)
ON CONFLICT (name) DO UPDATE SET
    rate = excluded.rate, concurrency = excluded.concurrency, lease = excluded.lease,
    updated_at = excluded.updated_at;

-- name: limiter_slot_lock
-- SQLite's write transaction already serialises every grant (PostgreSQL's parity twin).
SELECT :name AS name, :key AS key;

-- name: limiter_slot_take
-- A slot for :holder if fewer than :limit other live leases hold (:name, :key).
INSERT INTO conveyor_limiter_slots (name, key, holder, acquired_at, lease_expires_at)
SELECT :name, :key, :holder, (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0 + :lease
WHERE (SELECT count(*) FROM conveyor_limiter_slots
       WHERE name = :name AND key = :key AND holder <> :holder
         AND lease_expires_at > (julianday('now') - 2440587.5) * 86400.0) < :limit
ON CONFLICT (name, key, holder) DO UPDATE SET lease_expires_at = excluded.lease_expires_at
RETURNING holder;

-- name: limiter_slot_renew
-- Only a lease still live is renewed: once it ran out another holder may have the slot.
UPDATE conveyor_limiter_slots SET lease_expires_at = (julianday('now') - 2440587.5) * 86400.0 + :lease
WHERE name = :name AND key = :key AND holder = :holder AND lease_expires_at > (julianday('now') - 2440587.5) * 86400.0
RETURNING holder;

-- name: limiter_slot_release
DELETE FROM conveyor_limiter_slots WHERE name = :name AND key = :key AND holder = :holder
RETURNING holder;

-- name: limiter_slot_prune
-- Leases that ran out (their holders died): the pruner's pass.
DELETE FROM conveyor_limiter_slots WHERE lease_expires_at <= (julianday('now') - 2440587.5) * 86400.0;

-- name: limiter_declared_list
SELECT name, rate, concurrency, lease, updated_at FROM conveyor_limiters ORDER BY name;

-- name: limiter_holder_list
SELECT name, key, holder, acquired_at, lease_expires_at,
       lease_expires_at - (julianday('now') - 2440587.5) * 86400.0 AS remaining
FROM conveyor_limiter_slots WHERE lease_expires_at > (julianday('now') - 2440587.5) * 86400.0
ORDER BY name, key, acquired_at;
