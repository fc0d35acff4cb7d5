-- PLACEHOLDER on branch i14-policies only: version 8 belongs to the runtime track of
-- issue 14 (cluster throttle). Migrations must be numbered without gaps, so this
-- no-op stands in for it until the merge; drop this file when 0008 of the runtime
-- track is merged.
SELECT 1;
