"""Admission of claimed jobs past concurrency and rate limits, decided by the database.

A job over a limit goes back to ``scheduled`` with a short delay and its attempt
given back, through the same fenced write as any outcome. Concurrency is checked
first: a refused slot costs nothing, while a rate token once taken is spent. A job
claimed past its expiry is cancelled instead of run (``expirer.py``), before either.
"""

from __future__ import annotations

import logging
import random
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from .._job import Job, JobState
from .._limits import RateLimit
from .._storage import (
    ConcurrencyGroup,
    JobAck,
    RateRequest,
    Storage,
)
from .._task import Task
from .expirer import expired_ack, is_expired
from .producer import Producer

log = logging.getLogger("conveyor.limits")
#: How long a job refused a concurrency slot waits before it is claimed again.
SLOT_RETRY = 0.5


class Admission:
    """Decides which claimed jobs may start now; the others wait (``defer``)."""

    def __init__(self, tasks: Mapping[str, Task[Any, Any]], storage: Storage,
                 defer: Callable[[JobAck], None]) -> None:
        self._tasks, self._storage, self._defer = tasks, storage, defer

    def _wait(self, job: Job, delay: float, why: str) -> None:
        assert job.lease_token is not None
        log.debug("job %d waits %.2fs: %s", job.id, delay, why)
        self._defer(JobAck(job.id, job.lease_token, JobState.SCHEDULED, delay=delay,
                           attempt_delta=-1))

    async def admit(self, jobs: list[Job], producer: Producer) -> list[Job]:
        for job in jobs:
            if job.expires_at is not None:  # NULL for a job without an expiry
                jobs = self._unexpired(jobs)
                break
        if producer.rate_limit is None and not self._limited({job.task for job in jobs}):
            return jobs  # the common claim: per task, not per job, and no round trip
        jobs = await self._slots(jobs)
        return await self._rates(jobs, producer.rate_limit, producer.queue)

    def _unexpired(self, jobs: list[Job]) -> list[Job]:
        """The jobs still in time; the others end cancelled, their handler never run."""
        kept = []
        for job in jobs:
            if is_expired(job):
                log.info("job %d expired before it started (%s)", job.id, job.expires_at)
                self._defer(expired_ack(job))
            else:
                kept.append(job)
        return kept

    def _limited(self, names: set[str]) -> bool:
        """Whether a task of these names has a concurrency or rate limit (an unknown
        task has none: the executor gives its job back)."""
        for name in names:
            task = self._tasks.get(name)
            if task is not None and (task.defaults.concurrency or
                                     task.defaults.rate_limit is not None):
                return True
        return False

    async def _slots(self, jobs: list[Job]) -> list[Job]:
        groups: dict[str, list[Job]] = defaultdict(list)
        limits: dict[str, int] = {}
        for job in jobs:
            task = self._tasks.get(job.task)
            if task is not None and task.defaults.concurrency and job.concurrency_key:
                groups[job.concurrency_key].append(job)
                limits[job.concurrency_key] = task.defaults.concurrency
        if not groups:
            return jobs
        granted = await self._storage.job_concurrency_acquire([
            ConcurrencyGroup(key, limits[key], [(j.id, j.lease_token or 0) for j in members])
            for key, members in groups.items()
        ])
        admitted = []
        for job in jobs:
            if job.concurrency_key in groups and job.id not in granted:
                self._wait(job, SLOT_RETRY * random.uniform(0.8, 1.2), "concurrency")
            else:
                admitted.append(job)
        return admitted

    def _keys(self, job: Job, queue_rate: RateLimit | None, queue: str) -> list[tuple[str, RateLimit]]:
        keys = []
        task = self._tasks.get(job.task)
        if task is not None and task.defaults.rate_limit is not None:
            limit = task.defaults.rate_limit
            try:
                args, kwargs = task.key_arguments(job.args, job.kwargs)
                keys.append((limit.key_for(f"task:{job.task}", args, kwargs), limit))
            except Exception as exc:  # a key function that fails on these args
                log.warning("rate limit key of job %d failed (%s); using the task's key", job.id, exc)
                keys.append((f"task:{job.task}", limit))
        if queue_rate is not None:
            keys.append((f"queue:{queue}", queue_rate))
        return keys

    async def _rates(self, jobs: list[Job], queue_rate: RateLimit | None, queue: str) -> list[Job]:
        wanted = {job.id: self._keys(job, queue_rate, queue) for job in jobs}
        order: dict[str, list[Job]] = defaultdict(list)
        limits: dict[str, RateLimit] = {}
        for job in jobs:
            for key, limit in wanted[job.id]:
                order[key].append(job)
                limits[key] = limit
        if not order:
            return jobs
        keys = list(order)
        grants = await self._storage.rate_limit_acquire([
            RateRequest(k, limits[k].interval, limits[k].burst, len(order[k])) for k in keys
        ])
        delay: dict[int, float] = {}
        for key, grant in zip(keys, grants, strict=True):
            for position, job in enumerate(order[key][grant.granted:]):
                # Spread the refused ones over the refill instead of waking them together.
                wait = grant.wait + position * limits[key].interval
                delay[job.id] = max(delay.get(job.id, 0.0), wait)
        admitted = []
        for job in jobs:
            if job.id in delay:
                self._wait(job, delay[job.id], "rate limit")
            else:
                admitted.append(job)
        return admitted
