"""What the testing toolkit needs of the app: inline mode and ``drain``.

Both run jobs through ``InProcessRunner`` (``_runtime/inprocess.py``), the worker's own
executor, admission and fenced outcome writes, so state-change events, middleware and
the outcome semantics are those of production.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .. import _payload
from .._config import check_labels
from .._job import Job, JobState
from .._routing import check_task_filter
from .._task import JobSpec
from .maintenance import MaintenanceApp

if TYPE_CHECKING:
    from .._runtime.drain_result import DrainResult
    from .._runtime.inprocess import InProcessRunner


@dataclasses.dataclass(frozen=True, slots=True)
class InlineOptions:
    retries: bool = False
    include_scheduled: bool = False


class Inline:
    """``with app.inline():`` (or ``async with``): jobs run when they are enqueued."""

    def __init__(self, app: TestingApp, options: InlineOptions) -> None:
        self._app, self._options = app, options
        self._previous: list[InlineOptions | None] = []

    def __enter__(self) -> Inline:
        self._previous.append(self._app._inline)
        self._app._inline = self._options
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._app._inline = self._previous.pop()

    async def __aenter__(self) -> Inline:
        return self.__enter__()

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.__exit__(kind, exc, tb)


class TestingApp(MaintenanceApp):
    """Inline mode and drain; see ``Conveyor``."""

    __test__ = False  # not a pytest test class, whatever its name
    _inline: InlineOptions | None = None
    #: Until when a Throttle (node scope) holds each queue (database clock), across drains
    #: and inline runs, as a worker's producer holds as long.
    _throttle_holds: dict[str, datetime] | None = None

    def _holds(self) -> dict[str, datetime]:
        if self._throttle_holds is None:
            self._throttle_holds = {}
        return self._throttle_holds

    def inline(self, *, retries: bool = False, include_scheduled: bool = False) -> Inline:
        """Run each job when it is enqueued, in the caller, until the block ends.

        Each job is stored, claimed and run once with the real outcome: a return
        completes it, a raise leaves it retryable after its backoff (discarded once out
        of attempts), Snooze, Cancel and Discard do what they do on a worker. With
        ``retries=True`` a failed job is retried at once, in the caller, until it
        completes or runs out of attempts. A delayed job waits (run it with ``drain``
        after ``clock.advance``) unless ``include_scheduled``. Jobs enqueued with
        ``connection=`` are not run (they are not committed yet). A worker's rules
        apply: a paused queue runs nothing, a queue's default backoff times a retry, and
        a queue held by a ``Throttle`` (or cooling down after ``Throttle(scope="queue")``)
        runs nothing until its time is up (``include_scheduled`` skips that wait, as it
        skips delays); rate and concurrency limits are not applied (``drain`` applies
        them). ``enqueue`` returns the job as its run left it.

        Example::

            with app.inline():
                job = send_email.enqueue("a@b.c")
            assert job.state == "completed"
        """
        for name, value in (("retries", retries), ("include_scheduled", include_scheduled)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be a bool, got {value!r}")
        return Inline(self, InlineOptions(retries, include_scheduled))

    async def enqueue_many_async(self, specs: Sequence[JobSpec], *,
                                 connection: Any = None) -> list[Job]:
        jobs = await super().enqueue_many_async(specs, connection=connection)
        options = self._inline
        if options is None or connection is not None:
            return jobs
        return await self._run_inline(jobs, options)

    def enqueue_many(self, specs: Sequence[JobSpec], *, connection: Any = None) -> list[Job]:
        if self._inline is None or connection is not None:
            return super().enqueue_many(specs, connection=connection)
        return self._sync(self.enqueue_many_async(specs))

    async def enqueue_many_ids_async(self, specs: Sequence[JobSpec], *,
                                     connection: Any = None) -> list[int]:
        if self._inline is None or connection is not None:
            return await super().enqueue_many_ids_async(specs, connection=connection)
        return [job.id for job in await self.enqueue_many_async(specs)]

    def enqueue_many_ids(self, specs: Sequence[JobSpec], *, connection: Any = None) -> list[int]:
        if self._inline is None or connection is not None:
            return super().enqueue_many_ids(specs, connection=connection)
        return [job.id for job in self.enqueue_many(specs)]

    async def _run_inline(self, jobs: list[Job], options: InlineOptions) -> list[Job]:
        from .._runtime.inprocess import InProcessRunner  # only when jobs run inline

        storage = await self._observed()
        runner = InProcessRunner(self.registry, storage, holds=self._holds())
        runner.timeless = options.include_scheduled
        out = []
        try:
            await runner.load_settings()
            for job in jobs:
                runnable = job.state is JobState.AVAILABLE or (
                    options.include_scheduled and job.state is JobState.SCHEDULED)
                if job.duplicate or not runnable or await runner.waiting(job.queue):
                    out.append(job)  # a worker would not run it now either
                    continue
                await self._run_one_inline(runner, job, options)
                out.append(await storage.job_get(job.id) or job)
        finally:
            runner.close()
        return self._bound(out)

    @staticmethod
    async def _run_one_inline(runner: InProcessRunner, job: Job, options: InlineOptions) -> None:
        """Claim and run ``job``; with ``retries`` again at once while its attempts fail."""
        early = options.include_scheduled
        while (claimed := await runner.claim(job.id, early=early)) is not None:
            outcome = await runner.run(claimed)
            if not (options.retries and outcome is not None and outcome.kind == "retried"):
                return
            early = True  # its retry, now

    # -- drain ------------------------------------------------------------------------------

    async def drain_async(
        self, queues: Sequence[str] | None = None, *, max_jobs: int | None = None,
        include_scheduled: bool = False, cron: bool = True,
        labels: Mapping[str, str] | None = None, tasks: Sequence[str] | None = None,
    ) -> DrainResult:
        """Run every due job in this process, one at a time, until none is left.

        ``queues`` limits it to those queues (default: every queue); ``max_jobs`` stops
        after that many attempts; ``include_scheduled`` also takes scheduled and
        retryable jobs before they are due (so failing jobs are retried until they
        complete or run out of attempts); ``cron`` first enqueues the due ticks of the
        schedules. The rules a worker follows apply: paused queues are left alone, rate
        and concurrency limits apply, a queue's default backoff times retries, a
        ``Throttle`` holds its queue (``scope="queue"``: a cool-down every worker and
        later drain respects) for the rest of its time, which ``include_scheduled``
        skips as it skips delays. It claims as a worker started with ``labels`` (its
        ``--label``s) and ``tasks`` (``--tasks``) would: jobs that require other labels,
        or of other tasks, are left waiting and listed in ``result.skipped`` (with
        ``result.skipped_reasons``).
        Returns what ran: ``result.completed``, ``.retried``, ``.discarded``,
        ``.cancelled``, ``.snoozed``, ``.errors``, ``.held``.

        Example: ``assert len((await app.drain_async(queues=["mail"])).completed) == 1``
        """
        names = _check_queues(queues)
        if labels is not None:
            labels = check_labels(labels)
        task_filter = check_task_filter(tasks, self.tasks)
        if max_jobs is not None and (isinstance(max_jobs, bool) or not isinstance(max_jobs, int)
                                     or max_jobs < 1):
            raise ValueError(f"max_jobs must be an int >= 1 or None, got {max_jobs!r}")
        from .._runtime.inprocess import InProcessRunner

        runner = InProcessRunner(self.registry, await self._observed(),
                                 holds=self._holds(), labels=labels, tasks=task_filter)
        try:
            return await runner.drain(names, max_jobs, bool(include_scheduled), bool(cron))
        finally:
            runner.close()

    def drain(
        self, queues: Sequence[str] | None = None, *, max_jobs: int | None = None,
        include_scheduled: bool = False, cron: bool = True,
        labels: Mapping[str, str] | None = None, tasks: Sequence[str] | None = None,
    ) -> DrainResult:
        """Sync twin of ``drain_async``. Example: ``app.drain().completed``"""
        return self._sync(self.drain_async(queues, max_jobs=max_jobs,
                                           include_scheduled=include_scheduled, cron=cron,
                                           labels=labels, tasks=tasks))


def _check_queues(queues: Sequence[str] | None) -> list[str] | None:
    if queues is None:
        return None
    if isinstance(queues, str) or not isinstance(queues, Sequence):
        raise TypeError(f"queues must be a list of queue names, got {queues!r}")
    return [_payload.check_queue_name(q) for q in queues]
