"""Tasks and jobs: registering tasks, enqueueing, reading and changing jobs, and
running a worker."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar

from .. import _payload
from .._config import UnsetQueues, WorkerConfig
from .._errors import JobNotFoundError
from .._job import MAX_ID, Job, JobState
from .._storage import (
    InsertRun,
    JobInsert,
    JobSearchParams,
    LazyInserts,
    Storage,
    lazy_batches,
    made_batches,
)
from .._task import JobSpec
from .._task_inserts import to_inserts, to_runs
from . import search
from .caller import caller_connection, caller_connection_async, insert_on_thread_of
from .gcpause import paused_for
from .pipeline import InsertPipeline
from .results import ResultsApp

P = ParamSpec("P")
R = TypeVar("R")


class JobsApp(ResultsApp):
    """Tasks, enqueue, jobs and workers; see ``Conveyor``."""

    #: Per event loop: its single-enqueue pipeline.
    _pipelines: dict[asyncio.AbstractEventLoop, InsertPipeline]

    # -- enqueue ------------------------------------------------------------------------------

    def _batches(self, specs: Sequence[JobSpec], lazy: bool = False
                 ) -> list[Sequence[JobInsert]]:
        """Validate every job, then split them in batches of at most ``max_batch``.

        ``lazy`` (a write of the app's own, not in a caller's transaction): on
        PostgreSQL one batch of several jobs is made as the COPY reads it
        (``LazyInserts``), so the server inserts while the rest is encoded; a job
        refused then aborts the COPY, and nothing is written either. Several batches
        are made while the first is written, all before it commits (a refused job
        writes none of them); in a caller's transaction, all first. Both keep their runs."""
        if isinstance(specs, JobSpec) or not isinstance(specs, Sequence):
            raise TypeError("enqueue_many takes a list of jobs built with task.job(...)")
        for spec in specs:
            if not isinstance(spec, JobSpec):
                raise TypeError(f"expected a job built with task.job(...), got {spec!r}")
        now = self.clock.time() if self.clock is not None else None
        size = self.config.max_batch
        if self.dialect == "postgres" and len(specs) > 1:
            if lazy and len(specs) <= size:
                return [self._lazy(specs, now)]
            if lazy:  # the first batch makes the rest as the server inserts its rows
                parts = [self._lazy(specs[i:i + size], now) for i in range(0, len(specs), size)]
                return list(lazy_batches(self._lazy(specs, now), size,
                                         [(p.plain, p.queues) for p in parts]))
            return list(made_batches(self._runs(specs, now), size))  # runs kept for COPY
        inserts = self._inserts(specs, now)
        return [inserts[i:i + size] for i in range(0, len(inserts), size)]

    def _inserts(self, specs: Sequence[JobSpec], now: float | None) -> list[JobInsert]:
        inserts = to_inserts(specs, self.config.max_payload_bytes, now)
        if self.hooks.enqueue_hooks:
            inserts = [self._with_hooks(insert) for insert in inserts]
        return inserts

    def _lazy(self, specs: Sequence[JobSpec], now: float | None) -> LazyInserts:
        """Is the batch plain and which queues it names, read once per task and options
        object (``task.job(...)`` in a loop shares both)."""
        plain, queues = True, set()
        task: Any = None
        options: Any = None
        for s in specs:
            if s.task is task and s.options is options:
                continue
            task, options = s.task, s.options
            plain = plain and (
                s.task.defaults.unique is None and s.options.unique_key is None
                and s.requires() is None and s.task.defaults.expires_in is None
                and s.options.expires_in is None and s.options.expires_at is None
                and s.task.defaults.fair_key is None and s.options.fair_key is None)
            queues.add(s.task.defaults.queue if s.options.queue is None else s.options.queue)
        return LazyInserts(len(specs), lambda start, stop: self._runs(specs[start:stop], now),
                           plain=plain, queues=frozenset(queues))

    def _runs(self, specs: Sequence[JobSpec], now: float | None) -> list[InsertRun]:
        """``_inserts`` as runs; with enqueue hooks, a run per job (a hook sees each job)."""
        if self.hooks.enqueue_hooks:
            return [InsertRun.of(insert) for insert in self._inserts(specs, now)]
        return to_runs(specs, self.config.max_payload_bytes, now)

    def _insert(self, spec: JobSpec, now: float | None = None) -> JobInsert:
        """One job's insert, as ``_batches`` builds them (the workflow paths use it)."""
        insert = spec.to_insert(self.config.max_payload_bytes, now)
        return self._with_hooks(insert) if self.hooks.enqueue_hooks else insert

    def _with_hooks(self, insert: JobInsert) -> JobInsert:
        """The insert with its meta as the enqueue hooks leave it."""
        return dataclasses.replace(
            insert, meta_json=self.hooks.prepare_meta(insert.task, insert.meta_json))

    async def enqueue_many_async(
        self, specs: Sequence[JobSpec], *, connection: Any = None
    ) -> list[Job]:
        """Insert any number of jobs, ``max_batch`` (10,000) per round trip.

        Each batch is one transaction: all of its jobs or none. With ``connection``
        (the caller's own psycopg or sqlite3 connection, or a SQLAlchemy ``Session``,
        ``Connection``, ``AsyncSession`` or ``AsyncConnection`` on one) every batch runs
        in the caller's transaction, so all the jobs commit or roll back with it.
        """
        batches = self._batches(specs, lazy=connection is None)
        if connection is not None:
            raw = await caller_connection_async(connection, self.dialect)
            if type(raw).__module__.startswith("aiosqlite."):
                insert = self._offline.job_insert_many_sync
                return self._bound(
                    [j for b in batches for j in await insert_on_thread_of(raw, insert, b)])
            return self._bound(
                [j for b in batches for j in await self._offline.job_insert_many(b, raw)])
        if len(batches) == 1 and len(batches[0]) == 1:  # enqueue_async
            return self._bound([await (await self._pipeline()).insert(batches[0][0])])
        storage = (await self._observed()).with_source("enqueue")
        with paused_for(len(specs)):
            return self._bound(
                [job for batch in batches for job in await storage.job_insert_many(batch)])

    async def _pipeline(self) -> InsertPipeline:
        """This loop's single-enqueue pipeline (pipeline.py), on its current storage."""
        storage = await self._observed()
        loop = asyncio.get_running_loop()
        pipeline = self._pipelines.get(loop)
        if pipeline is None or pipeline.owner is not storage:
            for old in [lp for lp in self._pipelines if lp.is_closed()]:
                del self._pipelines[old]
            view = storage.with_source("enqueue")
            pipeline = self._pipelines[loop] = InsertPipeline(
                storage, view.job_insert_many, self.config.max_batch)
        return pipeline

    def enqueue_many(self, specs: Sequence[JobSpec], *, connection: Any = None) -> list[Job]:
        """Sync twin of ``enqueue_many_async`` (same batches, same atomicity).

        Example: ``app.enqueue_many([resize.job("/a.png"), resize.job("/b.png")])``
        """
        if connection is not None:
            batches = self._batches(specs)
            raw = caller_connection(connection, self.dialect)
            return self._bound(
                [j for b in batches for j in self._offline.job_insert_many_sync(b, raw)])
        storage = self._blocking_storage()
        if storage is not None:
            with paused_for(len(specs)):
                batches = self._batches(specs, lazy=True)
                return self._bound(
                    [job for b in batches for job in storage.job_insert_many_blocking(b)])
        return self._sync(self.enqueue_many_async(specs))

    async def enqueue_many_ids_async(
        self, specs: Sequence[JobSpec], *, connection: Any = None
    ) -> list[int]:
        """``enqueue_many_async`` returning only the new jobs' ids, in input order (for a
        unique job that already existed, that job's id): the fastest bulk path, since
        no Job is built. On PostgreSQL a large batch without unique jobs is written with
        ``COPY``. Same batches, same atomicity, same ``connection=``.

        Example: ``ids = await app.enqueue_many_ids_async([resize.job(p) for p in paths])``
        """
        batches = self._batches(specs, lazy=connection is None)
        if connection is not None:
            raw = await caller_connection_async(connection, self.dialect)
            if type(raw).__module__.startswith("aiosqlite."):
                insert = self._offline.job_insert_many_sync
                return [j.id for b in batches for j in await insert_on_thread_of(raw, insert, b)]
            return [i for b in batches for i in await self._offline.job_insert_ids(b, raw)]
        storage = (await self._observed()).with_source("enqueue")
        return [i for batch in batches for i in await storage.job_insert_ids(batch)]

    def enqueue_many_ids(self, specs: Sequence[JobSpec], *, connection: Any = None) -> list[int]:
        """Sync twin of ``enqueue_many_ids_async``.

        Example: ``ids = app.enqueue_many_ids([resize.job(p) for p in paths])``
        """
        if connection is not None:
            batches = self._batches(specs)
            raw = caller_connection(connection, self.dialect)
            return [j.id for b in batches for j in self._offline.job_insert_many_sync(b, raw)]
        storage = self._blocking_storage()
        if storage is not None:
            batches = self._batches(specs, lazy=True)
            return [i for b in batches for i in storage.job_insert_ids_blocking(b)]
        return self._sync(self.enqueue_many_ids_async(specs))

    def _blocking_storage(self) -> Storage | None:
        """The storage the sync API opened, to insert from this thread without a hop
        through the portal's loop; None until then, and while state-change listeners
        want to be called on that loop."""
        loop = self._portal.loop
        if loop is None or self.hooks.listeners:
            return None
        storage = self._storages.get(loop)
        return storage.inner if storage is not None else None

    # -- inspection and control ----------------------------------------------------------------

    async def get_job_async(self, job_id: int) -> Job | None:
        try:
            checked = _check_id(job_id)
        except JobNotFoundError:  # beyond the ids a row can have
            return None
        job = await (await self.storage()).job_get(checked)
        return None if job is None else self._bound([job])[0]

    async def list_jobs_async(
        self, *, state: JobState | str | None = None, queue: str | None = None,
        task: str | None = None, limit: int = 50, before_id: int | None = None,
        tag: str | None = None, args_contains: Mapping[str, Any] | None = None,
    ) -> list[Job]:
        params = search.list_params(state, queue, task, limit, before_id)
        storage = await self.storage()
        if tag is None and args_contains is None:
            return self._bound(await storage.job_list(params))
        flt = await search.bound(storage, search.search_filter(params, tag, args_contains),
                                 before=params.before_id)
        return self._bound(await storage.job_search(
            JobSearchParams(flt, params.limit, params.before_id)))

    async def search_jobs_async(
        self, *, state: JobState | str | None = None, queue: str | None = None,
        task: str | None = None, limit: int = 50, before_id: int | None = None,
        tag: str | None = None, args_contains: Mapping[str, Any] | None = None,
    ) -> search.SearchPage:
        """``list_jobs`` that says where to go on (``search.SearchPage``): by tag or
        argument, one window of ``search.SCAN`` ids below ``before_id``."""
        params = search.list_params(state, queue, task, limit, before_id)
        storage = await self.storage()
        if tag is None and args_contains is None:  # an index serves it: no window
            found = await storage.job_list(dataclasses.replace(params, limit=limit + 1))
            more = len(found) > limit
            return search.SearchPage(self._bound(found[:limit]),
                                     found[limit - 1].id if more else None)
        page = await search.search_page(
            storage, search.search_filter(params, tag, args_contains), limit, params.before_id)
        return dataclasses.replace(page, jobs=self._bound(page.jobs))

    async def count_jobs_async(self, *, queue: str | None = None) -> dict[str, int]:
        """Jobs per state, every state present (zero when none)."""
        storage = await self.storage()
        if queue is not None:
            _payload.check_queue_name(queue)
        counts = await storage.job_count_by_state(queue=queue)
        return {s.value: counts.get(s.value, 0) for s in JobState}

    # -- workers -------------------------------------------------------------------------------

    async def run_worker(
        self, queues: Mapping[str, int] | None = None, *, config: WorkerConfig | None = None,
        stop: asyncio.Event | None = None, on_started: Callable[[], object] | None = None,
    ) -> str | None:
        """Run a worker on the running loop until stopped (or drained, with burst).

        ``stop`` (an event of this loop) stops it from the program itself, as SIGTERM
        does: no new claims, running jobs get ``shutdown_timeout`` to finish, then are
        given back (e.g. a web server's shutdown, see ``conveyor.contrib.asgi``).
        ``on_started()`` is called once its services have started and it claims (a
        benchmark starts its clock there; ``conveyor demo`` its display).
        It returns None, or why the worker stopped to be replaced by a fresh process
        (``max_jobs_per_child``, ``max_memory_per_child``, ``hard_timeout_grace``).

        Without ``queues`` (and with a config whose queues nobody set), it serves
        every queue the app's tasks and schedules name, plus ``default``, each with the
        default concurrency. The worker logs the queues it serves when it starts.

        Example: ``await app.run_worker({"default": 10, "mail": 5})``
        """
        config = config or WorkerConfig()
        if queues is None and isinstance(config.queues, UnsetQueues):
            limit = next(iter(config.queues.values()))
            named = [task.defaults.queue for task in self.tasks.values()]
            named += [s.queue or self.tasks[s.task].defaults.queue
                      for s in self.schedules.values() if s.task in self.tasks]
            queues = {name: limit for name in ["default", *sorted(set(named))]}
        if queues is not None:
            config = dataclasses.replace(config, queues=dict(queues))
        for queue_name in config.queues:
            _payload.check_queue_name(queue_name)
        from .._runtime import Worker  # here: an app that only enqueues never loads the worker

        worker = Worker(self.registry, await self.storage(), config)

        async def stop_when_set(stop: asyncio.Event) -> None:
            await stop.wait()
            worker.request_stop()

        async def tell_started(on_started: Callable[[], object]) -> None:
            await worker.started.wait()
            on_started()

        watchers = ([asyncio.create_task(stop_when_set(stop))] if stop is not None else []) + (
            [asyncio.create_task(tell_started(on_started))] if on_started is not None else [])
        try:
            await worker.run()
        finally:
            for watcher in watchers:
                watcher.cancel()
        return worker.recycled


def _check_id(job_id: object) -> int:
    """A job id as the API takes it; one past the 64-bit range names no job (as the
    CLI and the dashboard say), rather than a driver's OverflowError."""
    if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id < 1:
        raise TypeError(f"a job id is a positive int, got {job_id!r}")
    if job_id > MAX_ID:
        raise JobNotFoundError(f"no job with id {job_id}")
    return job_id
