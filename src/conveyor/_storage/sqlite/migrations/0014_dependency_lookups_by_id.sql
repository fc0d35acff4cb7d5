-- Conveyor schema version 14 (SQLite): nothing to change. PostgreSQL's version makes its
-- dependency triggers find a dependent by id whatever the statistics (its planner could
-- choose the state index instead); SQLite finds a row by its rowid before any index.
-- The versions of both dialects stay numbered alike.
SELECT 1;
