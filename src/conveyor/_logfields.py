"""Job fields on every log line written while a job runs, not only Conveyor's own."""

from __future__ import annotations

import logging

from ._context import current_job


class JobFields(logging.Filter):
    """Adds ``job_id``, ``task``, ``queue`` and ``attempt`` of the running job to records
    that do not carry them (a handler's own ``log.info(...)``, in async and sync
    handlers alike). ``conveyor worker`` puts it on its handler; add it to yours with
    ``handler.addFilter(JobFields())``."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "job_id", None) is None:
            try:
                job = current_job()
            except RuntimeError:  # not inside a job
                return True
            record.job_id, record.task = job.id, job.task
            record.queue, record.attempt = job.queue, job.attempt
        return True
