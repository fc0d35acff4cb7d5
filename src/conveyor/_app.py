"""The Conveyor app: task registry, the async core API, and its thin sync layer."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar, overload

from . import _payload
from ._app_flow import FlowControl
from ._config import ConveyorConfig, WorkerConfig, url_from_env
from ._cron import Schedule
from ._errors import InvalidStateError, JobNotFoundError
from ._hooks import Hooks, Observable
from ._job import Job, JobState
from ._limits import KeyFunc, RateLimit, Unique
from ._portal import Portal
from ._storage import (
    JobCancelParams,
    JobCountByStateParams,
    JobGetParams,
    JobInsertManyParams,
    JobListParams,
    JobRetryParams,
    MigrateParams,
    Migration,
    Storage,
    WakeHub,
    create_storage,
)
from ._task import Backoff, JobSpec, Task, TaskDecorator, TaskOptions

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class Conveyor(FlowControl, Observable):
    """A job queue bound to one database.

    Example::

        app = Conveyor("sqlite:///jobs.db")

        @app.task(queue="mail")
        async def send_email(to: str) -> None: ...

        send_email.enqueue("a@b.c")
    """

    def __init__(self, url: str | None = None, *, config: ConveyorConfig | None = None) -> None:
        self.url = url if url is not None else url_from_env()
        self.config = config or ConveyorConfig()
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.schedules: dict[str, Schedule] = {}
        self.hooks = Hooks()
        self._hub = WakeHub()
        # Fail on a malformed URL now, not at the first enqueue.
        self._offline = create_storage(self.url, self._hub, self.config.pool_max_size)
        self._portal = Portal()
        self._storages: dict[asyncio.AbstractEventLoop, Storage] = {}
        self._open_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<Conveyor {self._offline.capabilities.dialect} tasks={len(self.tasks)}>"

    # -- tasks ----------------------------------------------------------------------------

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self,
        *,
        name: str | None = None,
        queue: str = "default",
        priority: int = 0,
        max_attempts: int = 20,
        timeout: float | None = None,
        backoff: Backoff | float | None = None,
        tags: Sequence[str] = (),
        unique: Unique | None = None,
        rate_limit: RateLimit | str | None = None,
        concurrency: int | None = None,
        concurrency_key: KeyFunc | None = None,
    ) -> TaskDecorator: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        queue: str = "default",
        priority: int = 0,
        max_attempts: int = 20,
        timeout: float | None = None,
        backoff: Backoff | float | None = None,
        tags: Sequence[str] = (),
        unique: Unique | None = None,
        rate_limit: RateLimit | str | None = None,
        concurrency: int | None = None,
        concurrency_key: KeyFunc | None = None,
    ) -> Any:
        """Register a function as a task (``@app.task`` or ``@app.task(queue="mail")``)."""

        def register(func: Callable[..., Any]) -> Task[Any, Any]:
            task_name = _payload.check_task_name(name or func.__name__)
            if task_name in self.tasks:
                raise ValueError(f"task {task_name!r} is already registered; pass name=")
            if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
                raise ValueError("timeout must be a positive number of seconds")
            limit = concurrency if concurrency is not None or concurrency_key is None else 1
            if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                      or limit < 1):
                raise ValueError("concurrency must be an int >= 1")
            if unique is not None and not isinstance(unique, Unique):
                raise TypeError("unique= takes a conveyor.Unique(...)")
            options = TaskOptions(
                name=task_name,
                queue=_payload.check_queue_name(queue),
                priority=_payload.check_priority(priority),
                max_attempts=_payload.check_max_attempts(max_attempts),
                timeout=timeout,
                backoff=backoff,
                tags=tuple(_payload.check_tags(tags)),
                unique=unique,
                rate_limit=RateLimit(rate_limit) if isinstance(rate_limit, str) else rate_limit,
                concurrency=limit,
                concurrency_key=concurrency_key,
            )
            task = Task(self, func, options)
            self.tasks[task_name] = task
            return task

        return register(fn) if fn is not None else register

    # -- storage ----------------------------------------------------------------------------

    async def storage(self) -> Storage:
        """The open storage for the running event loop (one per loop, opened on first use)."""
        loop = asyncio.get_running_loop()
        storage = self._storages.get(loop)
        if storage is None:
            for old in [lp for lp in self._storages if lp.is_closed()]:
                del self._storages[old]
            storage = create_storage(self.url, self._hub, self.config.pool_max_size)
            self._storages[loop] = storage
            try:
                await storage.open()
            except BaseException:
                self._storages.pop(loop, None)
                raise
        return storage

    async def close_async(self) -> None:
        """Close this loop's connections. Example: ``await app.close_async()``"""
        storage = self._storages.pop(asyncio.get_running_loop(), None)
        if storage is not None:
            await storage.close()

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        """The one bridge from the sync API to the async core."""
        return self._portal.call(coro)

    def close(self) -> None:
        """Close the sync API's connections and its background loop."""
        if self._portal.loop is not None:
            self._portal.call(self.close_async())
        self._portal.stop()

    # -- enqueue --------------------------------------------------------------------------

    def _inserts(self, specs: Sequence[JobSpec]) -> JobInsertManyParams:
        if isinstance(specs, JobSpec) or not isinstance(specs, Sequence):
            raise TypeError("enqueue_many takes a list of jobs built with task.job(...)")
        if len(specs) > self.config.max_batch:
            raise ValueError(f"at most {self.config.max_batch} jobs per enqueue_many call")
        for spec in specs:
            if not isinstance(spec, JobSpec):
                raise TypeError(f"expected a job built with task.job(...), got {spec!r}")
        cap = self.config.max_payload_bytes
        return JobInsertManyParams([self.hooks.prepare(spec.to_insert(cap)) for spec in specs])

    async def enqueue_many_async(
        self, specs: Sequence[JobSpec], *, connection: Any = None
    ) -> list[Job]:
        """Insert many jobs in one round trip; all or none.

        ``connection`` is the caller's own psycopg connection (or sqlite3 connection):
        the jobs then commit or roll back with the caller's transaction.
        """
        params = self._inserts(specs)
        if not params.jobs:
            return []
        if connection is not None:
            return await self._offline.job_insert_many(params, connection)
        jobs = await (await self.storage()).job_insert_many(params)
        self.hooks.emit_jobs([j for j in jobs if not j.duplicate], None, "enqueue")
        return jobs

    def enqueue_many(self, specs: Sequence[JobSpec], *, connection: Any = None) -> list[Job]:
        """Sync twin of ``enqueue_many_async``.

        Example: ``app.enqueue_many([resize.job("/a.png"), resize.job("/b.png")])``
        """
        if connection is not None:
            params = self._inserts(specs)
            return self._offline.job_insert_many_sync(params, connection) if params.jobs else []
        storage = self._blocking_storage()
        if storage is not None:
            params = self._inserts(specs)
            return storage.job_insert_many_blocking(params) if params.jobs else []
        return self._portal.call(self.enqueue_many_async(specs))

    def _blocking_storage(self) -> Storage | None:
        """The storage the sync API opened, to insert from this thread without a hop
        through the portal's loop; None until then, and while state-change listeners
        want to be called on that loop."""
        loop = self._portal.loop
        if loop is None or self.hooks.listeners:
            return None
        return self._storages.get(loop)

    # -- inspection and control -----------------------------------------------------------

    async def get_job_async(self, job_id: int) -> Job | None:
        return await (await self.storage()).job_get(JobGetParams(_check_id(job_id)))

    async def list_jobs_async(
        self,
        *,
        state: JobState | str | None = None,
        queue: str | None = None,
        task: str | None = None,
        limit: int = 50,
        before_id: int | None = None,
    ) -> list[Job]:
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
            raise ValueError("limit must be an int from 1 to 10000")
        params = JobListParams(
            state=JobState(state) if state is not None else None,
            queue=_payload.check_queue_name(queue) if queue is not None else None,
            task=_payload.check_task_name(task) if task is not None else None,
            limit=limit,
            before_id=_check_id(before_id) if before_id is not None else None,
        )
        return await (await self.storage()).job_list(params)

    async def retry_job_async(self, job_id: int) -> Job:
        """Put a finished or waiting job back in its queue now, with one more attempt."""
        storage = await self.storage()
        before = await self.hooks.state_before(storage, job_id)
        job = await storage.job_retry(JobRetryParams(_check_id(job_id)))
        self.hooks.changed(job, before, "api")
        return job or await self._explain(storage, job_id, "retried")

    async def cancel_job_async(self, job_id: int) -> Job:
        """Cancel a queued job at once; a running job is stopped by its worker."""
        storage = await self.storage()
        before = await self.hooks.state_before(storage, job_id)
        job = await storage.job_cancel(JobCancelParams(_check_id(job_id)))
        self.hooks.changed(job, before, "api")
        return job or await self._explain(storage, job_id, "cancelled")

    async def _explain(self, storage: Storage, job_id: int, verb: str) -> Job:
        job = await storage.job_get(JobGetParams(job_id))
        if job is None:
            raise JobNotFoundError(f"no job with id {job_id}")
        raise InvalidStateError(f"job {job_id} is {job.state.value} and cannot be {verb}")

    async def count_jobs_async(self, *, queue: str | None = None) -> dict[str, int]:
        """Jobs per state, every state present (zero when none)."""
        storage = await self.storage()
        counts = await storage.job_count_by_state(JobCountByStateParams(queue))
        return {s.value: counts.get(s.value, 0) for s in JobState}

    async def migrate_async(self, *, dry_run: bool = False) -> list[Migration]:
        """Apply pending schema migrations (Postgres needs this once per version)."""
        storage = create_storage(self.url, self._hub, 2)
        await storage.open(check_schema=False)
        try:
            return await storage.migrate(MigrateParams(dry_run=dry_run))
        finally:
            await storage.close()

    def get_job(self, job_id: int) -> Job | None:
        """Example: ``app.get_job(job.id).state``"""
        return self._portal.call(self.get_job_async(job_id))

    def list_jobs(
        self,
        *,
        state: JobState | str | None = None,
        queue: str | None = None,
        task: str | None = None,
        limit: int = 50,
        before_id: int | None = None,
    ) -> list[Job]:
        """Newest first. Example: ``app.list_jobs(state="discarded", limit=10)``"""
        return self._portal.call(
            self.list_jobs_async(
                state=state, queue=queue, task=task, limit=limit, before_id=before_id
            )
        )

    def retry_job(self, job_id: int) -> Job:
        return self._portal.call(self.retry_job_async(job_id))

    def cancel_job(self, job_id: int) -> Job:
        return self._portal.call(self.cancel_job_async(job_id))

    def count_jobs(self, *, queue: str | None = None) -> dict[str, int]:
        return self._portal.call(self.count_jobs_async(queue=queue))

    def migrate(self, *, dry_run: bool = False) -> list[Migration]:
        return self._portal.call(self.migrate_async(dry_run=dry_run))

    # -- workers ----------------------------------------------------------------------------

    async def run_worker(
        self,
        queues: Mapping[str, int] | None = None,
        *,
        config: WorkerConfig | None = None,
    ) -> None:
        """Run a worker on the running loop until stopped (or drained, with burst).

        Example: ``await app.run_worker({"default": 10, "mail": 5})``
        """
        from ._runtime import Worker

        config = config or WorkerConfig()
        if queues is not None:
            config = WorkerConfig(**{**_asdict(config), "queues": dict(queues)})
        for queue_name in config.queues:
            _payload.check_queue_name(queue_name)
        worker = Worker(self, await self.storage(), config)
        await worker.run()


def _check_id(job_id: object) -> int:
    if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id < 1:
        raise TypeError(f"a job id is a positive int, got {job_id!r}")
    return job_id


def _asdict(config: WorkerConfig) -> dict[str, Any]:
    return {f: getattr(config, f) for f in config.__dataclass_fields__}
