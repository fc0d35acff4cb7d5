-- Each node records its own liveness ttl: a worker started with a longer node_ttl is
-- alive (and its jobs are not rescued) until its own ttl has passed.
ALTER TABLE conveyor_nodes ADD COLUMN ttl REAL NOT NULL DEFAULT 15;
