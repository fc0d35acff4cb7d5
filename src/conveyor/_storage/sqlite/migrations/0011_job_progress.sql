-- A running handler's progress (current_job().set_progress): a fraction in 0..1, a
-- short message, and when the worker last wrote them (coalesced, fenced by the lease).
ALTER TABLE conveyor_jobs ADD COLUMN progress REAL
    CHECK (progress IS NULL OR (progress >= 0 AND progress <= 1));
ALTER TABLE conveyor_jobs ADD COLUMN progress_message TEXT;
ALTER TABLE conveyor_jobs ADD COLUMN progress_at REAL;
