-- Limiters (app.limiter), PostgreSQL dialect; times on the database clock.

-- name: limiter_declare
INSERT INTO conveyor_limiters (name, rate, concurrency, lease, updated_at)
VALUES (%(name)s, %(rate)s, %(concurrency)s, %(lease)s, now())
ON CONFLICT (name) DO UPDATE SET
    rate = excluded.rate, concurrency = excluded.concurrency, lease = excluded.lease,
    updated_at = excluded.updated_at;

-- name: limiter_slot_lock
-- Serialises the grants of one (name, key) across every process until the transaction
-- ends: limiter_slot_take then counts the holders committed before it.
SELECT pg_advisory_xact_lock(
    hashtextextended('conveyor:limiter:' || %(name)s || ':' || %(key)s, 0)) AS locked;

-- name: limiter_slot_take
-- A slot for %(holder)s if fewer than %(limit)s other live leases hold (name, key).
INSERT INTO conveyor_limiter_slots (name, key, holder, acquired_at, lease_expires_at)
SELECT %(name)s, %(key)s, %(holder)s, now(), now() + %(lease)s::float8 * interval '1 second'
WHERE (SELECT count(*) FROM conveyor_limiter_slots
       WHERE name = %(name)s AND key = %(key)s AND holder <> %(holder)s
         AND lease_expires_at > now()) < %(limit)s
ON CONFLICT (name, key, holder) DO UPDATE SET lease_expires_at = excluded.lease_expires_at
RETURNING holder;

-- name: limiter_slot_renew
-- Only a lease still live is renewed: once it ran out another holder may have the slot.
UPDATE conveyor_limiter_slots
SET lease_expires_at = now() + %(lease)s::float8 * interval '1 second'
WHERE name = %(name)s AND key = %(key)s AND holder = %(holder)s AND lease_expires_at > now()
RETURNING holder;

-- name: limiter_slot_release
DELETE FROM conveyor_limiter_slots
WHERE name = %(name)s AND key = %(key)s AND holder = %(holder)s
RETURNING holder;

-- name: limiter_slot_prune
-- Leases that ran out (their holders died): the pruner's pass.
DELETE FROM conveyor_limiter_slots WHERE lease_expires_at <= now();

-- name: limiter_declared_list
SELECT name, rate, concurrency, lease, updated_at FROM conveyor_limiters ORDER BY name;

-- name: limiter_holder_list
SELECT name, key, holder, acquired_at, lease_expires_at,
       extract(epoch FROM lease_expires_at - now())::float8 AS remaining
FROM conveyor_limiter_slots WHERE lease_expires_at > now()
ORDER BY name, key, acquired_at;
