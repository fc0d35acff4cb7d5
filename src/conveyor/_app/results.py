"""Results you can wait for: ``job.wait``, ``job.wait_async`` and ``app.wait_jobs``.

One ``Waiter`` per storage (per event loop) serves every wait on it: each wake-up
re-reads all the ids this loop waits for with one query, so 1,000 concurrent waits cost
one query per wake, not 1,000. Wake-ups come from the storage's finish notifications
(PostgreSQL: a NOTIFY on the finished channel from every statement that makes jobs
final; SQLite: this process's own final-state writes). A re-check when nothing woke the
waiter covers lost notifications and, on SQLite, other processes' writes: it backs off
from ``first`` to ``most`` seconds (``remote_finish_wakes`` picks the pair).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

from .._errors import (
    JobCancelledError,
    JobDiscardedError,
    JobFailedError,
    JobNotFoundError,
    WaitTimeoutError,
)
from .._job import FINAL_STATES, MAX_ID, Job, JobState
from .._payload_hints import HintCompiler, safe_hints
from .._storage import JobFilter, JobSearchParams, Storage
from .base import AppBase

#: Re-check intervals (first, most) when finishes elsewhere are notified (PostgreSQL):
#: only lost notifications are left to find.
NOTIFIED_RECHECK = (2.0, 30.0)
#: Re-check intervals (first, most) when other processes' finishes are not notified
#: (SQLite): a bounded backoff poll.
POLLED_RECHECK = (0.05, 1.0)
#: Most ids one re-read asks for (the rest in further queries of the same wake-up).
READ_CHUNK = 1000
_FINAL = tuple(sorted(FINAL_STATES))


class Waiter:
    """Every wait of one storage: futures per job id, one reading task while any wait."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        caps = storage.capabilities
        self.recheck = NOTIFIED_RECHECK if caps.remote_finish_wakes else POLLED_RECHECK
        self._loop = asyncio.get_running_loop()
        self._waits: dict[int, list[asyncio.Future[Job]]] = {}
        #: Ids not read since their wait began: read whatever their state (a missing id
        #: is an unknown job), the others only once final.
        self._fresh: set[int] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: Queries this waiter made (tests count them).
        self.reads = 0

    async def wait(self, ids: Sequence[int], timeout: float | None) -> list[Job]:
        """The jobs once all are final, in the order of ``ids``."""
        futures = [self._add(job_id) for job_id in ids]
        try:
            async with asyncio.timeout(timeout):
                return list(await asyncio.gather(*futures))
        except TimeoutError:
            # the timeout cancelled every future gather() still waited on: those are the
            # jobs not finished (a settled one holds its job, or its error)
            left = sorted({i for i, f in zip(ids, futures, strict=True)
                           if not f.done() or f.cancelled()})
            raise WaitTimeoutError(
                f"{len(left)} job(s) not finished after {timeout:g}s: {left[:10]}"
                f"{'...' if len(left) > 10 else ''} (left as they are)", left) from None
        finally:
            for job_id, future in zip(ids, futures, strict=True):
                self._remove(job_id, future)

    def _add(self, job_id: int) -> asyncio.Future[Job]:
        future: asyncio.Future[Job] = self._loop.create_future()
        self._waits.setdefault(job_id, []).append(future)
        self._fresh.add(job_id)
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = self._loop.create_task(self._run(), name="conveyor-wait")
        return future

    def _remove(self, job_id: int, future: asyncio.Future[Job]) -> None:
        futures = self._waits.get(job_id, [])
        if future in futures:
            futures.remove(future)
        if not futures:
            self._waits.pop(job_id, None)
            self._fresh.discard(job_id)
            if not self._waits:
                self._wake.set()  # nobody waits: the reading task ends now, not at a recheck
        if future.done() and not future.cancelled():
            future.exception()  # retrieved: an error gather() did not report is not logged
        future.cancel()  # a no-op once done

    async def close(self) -> None:
        """End the reading task (the app closes its storage): none is left pending
        on a loop that stops ("Task was destroyed but it is pending!")."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _notified(self, _payload: str) -> None:
        """From any thread (the listener's, a worker's storage thread)."""
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake.set)

    async def _run(self) -> None:
        """Read while anyone waits; a storage error fails every current wait."""
        unsubscribe = self.storage.finish_subscribe(self._notified)
        first, most = self.recheck
        interval = first
        try:
            while self._waits:
                self._wake.clear()
                try:
                    await self._check()
                except Exception as exc:  # e.g. DatabaseUnavailableError
                    self._fail_all(exc)
                    break
                if not self._waits:
                    break
                try:
                    await asyncio.wait_for(self._wake.wait(), interval)
                    interval = first
                except TimeoutError:  # a re-check reads every id: it finds deleted jobs
                    interval = min(interval * 2, most)
                    self._fresh.update(self._waits)
        finally:
            unsubscribe()

    async def _check(self) -> None:
        fresh = sorted(self._fresh)
        self._fresh.clear()
        seen = await self._read(fresh, ())
        for job_id in set(fresh) - {job.id for job in seen}:
            self._settle(job_id, JobNotFoundError(f"no job with id {job_id}"))
        rest = sorted(set(self._waits) - set(fresh))
        for job in [*seen, *await self._read(rest, _FINAL)]:
            if job.state.is_final:
                self._settle(job.id, job)

    async def _read(self, ids: list[int], states: tuple[JobState, ...]) -> list[Job]:
        jobs: list[Job] = []
        for i in range(0, len(ids), READ_CHUNK):
            chunk = tuple(ids[i:i + READ_CHUNK])
            self.reads += 1
            jobs += await self.storage.job_search(JobSearchParams(
                JobFilter(states=states, ids=chunk), limit=len(chunk)))
        return jobs

    def _settle(self, job_id: int, outcome: Job | Exception) -> None:
        for future in self._waits.pop(job_id, []):
            if not future.done():
                if isinstance(outcome, Exception):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)

    def _fail_all(self, exc: Exception) -> None:
        for job_id in list(self._waits):
            self._settle(job_id, exc)


class ResultsApp(AppBase):
    """Waiting for jobs to finish; see ``Conveyor`` and docs/results.md."""

    async def wait_jobs_async(
        self, jobs: Sequence[Job | int], timeout: float | None = None, *,
        raise_failed: bool = True,
    ) -> list[Job]:
        """Wait until every job (a Job or an id) is final; the finished jobs in the given
        order, each ``result`` decoded as its task's return annotation.

        Raises ``JobDiscardedError``/``JobCancelledError`` for the first such job in the
        list (``raise_failed=False``: return it as it is), ``WaitTimeoutError`` after
        ``timeout`` seconds (the jobs are left as they are), ``JobNotFoundError`` for an
        unknown id.

        Example: ``done = await app.wait_jobs_async([a, b], timeout=60)``
        """
        ids = _ids(jobs)
        limit = _check_timeout(timeout)
        storage = await self.storage()
        finished = await self._waiter(storage).wait(ids, limit)
        out = [self._with_result(job) for job in finished]
        if raise_failed:
            for job in out:
                if job.state is not JobState.COMPLETED:
                    raise failure(job)
        return out

    async def wait_job_async(self, job_id: int, timeout: float | None = None) -> Job:
        """One job; see ``wait_jobs_async``. Example: ``await app.wait_job_async(42)``"""
        return (await self.wait_jobs_async([_id(job_id)], timeout))[0]

    async def close_async(self) -> None:
        waiter = self.__dict__.get("_waiters", {}).pop(asyncio.get_running_loop(), None)
        if waiter is not None:
            await waiter.close()
        await super().close_async()

    def _waiter(self, storage: Storage) -> Waiter:
        """This loop's waiter (a new one after ``rebind`` or a reopened storage)."""
        waiters: dict[asyncio.AbstractEventLoop, Waiter] = self.__dict__.setdefault(
            "_waiters", {})
        loop = asyncio.get_running_loop()
        waiter = waiters.get(loop)
        if waiter is None or waiter.storage is not storage:
            for old in [lp for lp in waiters if lp.is_closed()]:
                del waiters[old]
            waiter = waiters[loop] = Waiter(storage)
        return waiter

    def _bound(self, jobs: list[Job]) -> list[Job]:
        """Give each job its way back here, for ``job.wait()``."""
        for job in jobs:
            object.__setattr__(job, "_waiter", self)
        return jobs

    def _with_result(self, job: Job) -> Job:
        """The job bound to this app, its result typed by its task's return annotation
        (an unknown task, or a result that does not fit: the plain JSON)."""
        decode = self._result_decoder(job.task) if job.state is JobState.COMPLETED else None
        if decode is not None and job.result is not None:
            with contextlib.suppress(Exception):  # stored by another version: as stored
                job = dataclasses.replace(job, result=decode(job.result))
        return self._bound([job])[0]

    def _result_decoder(self, task_name: str) -> Callable[[Any], Any] | None:
        decoders: dict[str, Callable[[Any], Any] | None] = self.__dict__.setdefault(
            "_result_decoders", {})
        if task_name not in decoders:
            task = self.tasks.get(task_name)
            # a chunk handler's annotation is of the list: untag a job's result only
            decoders[task_name] = (None if task is None else _decoder(
                task.fn if task.defaults.chunk is None else _untyped, task.codec))
        return decoders[task_name]


def _untyped() -> Any:
    """No return annotation: a result is only untagged."""


def _decoder(fn: Callable[..., Any], codec: Any) -> Callable[[Any], Any]:
    """Untag what the worker stored, then convert it to the return annotation."""
    try:
        convert = HintCompiler(codec).compile(safe_hints(fn).get("return", Any))
    except Exception:  # an annotation we cannot follow: untagged values only
        convert = None

    def decode(value: Any) -> Any:
        value = codec.untag(value)
        return convert(value) if convert is not None else value

    return decode


def failure(job: Job) -> JobFailedError:
    """The error a waiter gets for a job that ended discarded or cancelled."""
    last = job.errors[-1] if job.errors else None
    kind = JobCancelledError if job.state is JobState.CANCELLED else JobDiscardedError
    return kind(job, last)


def _ids(jobs: object) -> list[int]:
    if isinstance(jobs, Job | int | str | bytes) or not isinstance(jobs, Sequence):
        raise TypeError(f"wait_jobs takes a list of jobs or job ids, got {jobs!r}")
    return [job.id if isinstance(job, Job) else _id(job) for job in jobs]


def _id(job_id: object) -> int:
    if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id < 1:
        raise TypeError(f"expected a Job or a positive int job id, got {job_id!r}")
    if job_id > MAX_ID:  # no row has it (the databases' ids are 64-bit)
        raise JobNotFoundError(f"no job with id {job_id}")
    return job_id


def _check_timeout(timeout: object) -> float | None:
    if timeout is None:
        return None
    if (isinstance(timeout, bool) or not isinstance(timeout, int | float)
            or not 0 <= timeout < math.inf):
        raise TypeError(f"timeout takes None or a finite number of seconds >= 0, got {timeout!r}")
    return float(timeout)
