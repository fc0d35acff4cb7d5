"""The expirer: a job not started by its ``expires_at`` never runs.

Two places enforce it, both on the database clock. A worker's admission cancels a job
it claimed past its expiry instead of running it (``expired_ack``), and this service,
on the leader, cancels the waiting jobs whose time has passed, so that expired jobs end
in a paused or idle queue too. Both write through the observed storage, which emits the
state change (cancelled, the reason "expired" in the job's errors) like any cancel."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from .. import _payload
from .._job import EXPIRED_ERROR, Job, JobState
from .._storage import JobAck, JobChanged, JobExpireParams, Storage
from .service import Leadership, Service

log = logging.getLogger("conveyor.cluster")

#: The ``reason`` of an expired job's error entry (the dashboard, ``explain_job``).
EXPIRED = "expired"


def expired_error(expires_at: datetime | None = None, attempt: int | None = None) -> str:
    """The error entry of an expired job, as JSON text (the message is always the same:
    the dashboard's filter finds expired jobs by it)."""
    entry: dict[str, object] = {"error": EXPIRED_ERROR, "reason": EXPIRED}
    if expires_at is not None:
        entry["expires_at"] = expires_at.isoformat()
    if attempt is not None:
        entry.update(attempt=attempt, at=datetime.now(UTC).isoformat())
    return _payload.dumps(entry)


def is_expired(job: Job) -> bool:
    """A claimed job past its expiry: both times are the database's (the claim wrote
    ``attempted_at``), so no clock of this process is trusted."""
    expires = job.expires_at
    return expires is not None and job.attempted_at is not None and job.attempted_at >= expires


def expired_ack(job: Job) -> JobAck:
    """The fenced outcome of a claimed job that expired: cancelled, its attempt given
    back (it never started), the reason in its errors."""
    assert job.lease_token is not None
    return JobAck(job.id, job.lease_token, JobState.CANCELLED,
                  error_json=expired_error(job.expires_at, job.attempt - 1), attempt_delta=-1)


def is_expired_error(entry: object) -> bool:
    """Whether a job's error entry says it expired."""
    return isinstance(entry, dict) and entry.get("reason") == EXPIRED


class Expirer(Service):
    """Cancels waiting jobs past their ``expires_at`` in bounded batches (leader only)."""

    name = "expirer"

    def __init__(self, storage: Storage, leader: Leadership | None, interval: float,
                 batch: int = 1000) -> None:
        self._storage, self._leader = storage, leader
        self.interval = interval
        self._batch = batch

    async def run_once(self) -> list[JobChanged]:
        if self._leader is not None and not self._leader.is_leader:
            return []
        changed: list[JobChanged] = []
        for _ in range(100):  # at most 100 batches a pass: the next pass goes on
            done = await self._storage.job_expire(JobExpireParams(self._batch, expired_error()))
            changed += done
            if len(done) < self._batch:
                break
        if changed:
            log.info("cancelled %d expired job(s): %s", len(changed),
                     [c.id for c in changed[:20]])
        return changed
