-- Schema 16 is PostgreSQL's conveyor_enqueue() function (enqueue from SQL); SQLite has
-- no stored functions, so this version changes nothing here (the numbers stay in step).
SELECT 1;
