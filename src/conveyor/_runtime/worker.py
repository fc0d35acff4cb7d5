"""A worker process's runtime: producers, executions, acker and a list of services,
and a graceful shutdown (``shutdown.py``) that gives unfinished jobs back without using
an attempt.

The worker gets a ``Registry`` (tasks, schedules, hooks, settings), never the app.
Every write goes through an ``ObservedStorage`` view attributed to "worker": that view
emits the state changes of claims and outcomes and feeds the metrics service."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable

from .._config import WorkerConfig
from .._context import JobContext, ShutdownSignal, WorkerNode
from .._job import Job, JobState
from .._observed import ObservedStorage
from .._registry import Registry
from .._routing import check_task_filter
from .._storage import JobAck, Storage, make_ack
from .acker import Acker
from .admission import Admission
from .archiver import Archiver
from .chunks import ChunkCall, Chunker, chunk_tasks
from .cooldown import Cooldowns
from .cron import CronScheduler
from .eager import spawn
from .execution import Execution
from .executor import Executor
from .expirer import Expirer
from .handoff import read_handoff, settle
from .hardlimit import Watchdog
from .heartbeat import Heartbeat
from .leader import LeaderElector
from .metrics import Metrics
from .producer import Producer
from .progress import ProgressFlusher
from .pruner import Pruner
from .queue_settings import QueueSettings
from .recycler import Recycler
from .rescuer import Rescuer
from .service import Service
from .shutdown import GracefulShutdown
from .signals import install_stop_signals
from .stager import Stager
from .vacuumer import VacuumConfig, Vacuumer

log = logging.getLogger("conveyor.worker")


class Worker(GracefulShutdown):
    """Example: ``await Worker(app.registry, await app.storage(), WorkerConfig()).run()``"""

    def __init__(self, registry: Registry, storage: Storage, config: WorkerConfig) -> None:
        if config.tasks is not None:  # a clear error now, not jobs that never run
            config = dataclasses.replace(
                config, tasks=check_task_filter(config.tasks, registry.tasks))
        self.registry = registry
        self.config = config
        self.node_id = uuid.uuid4().hex
        #: Who runs its jobs, as ``current_job()`` tells their handlers.
        self.node = WorkerNode(self.node_id, socket.gethostname(), os.getpid(),
                               dict(config.labels))
        self._executions: dict[int, Execution] = {}
        observed = storage if isinstance(storage, ObservedStorage) else ObservedStorage(
            storage, registry.hooks)
        self._storage = storage = observed.with_source(
            "worker", node=self.node_id, attempts=self._executions.get)
        self._meta_cap = registry.config.max_payload_bytes
        self._stopping = asyncio.Event()
        #: Set once its services have started and it begins to claim (``run_worker``'s
        #: ``on_started``).
        self.started = asyncio.Event()
        #: Set when draining starts; every running handler sees it on current_job().
        self.shutdown_signal = ShutdownSignal()
        self._services_stop = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._claiming: list[asyncio.Task[None]] = []  # the producers' loops, while running
        self.executor = Executor(registry, config.sync_threads or min(sum(config.queues.values()), 256),
                                 self.node_id, unknown_task_timeout=config.unknown_task_timeout)
        # archive_after 0: the archiver would move a finished job at once, so a plain
        # completion goes to history at its ack instead (the archiver keeps the rest)
        self.acker = Acker(storage, self._on_flushed, self.node_id,
                           retire=config.archive_after == 0)
        self.admission = Admission(registry.tasks, storage, self._push)
        #: Gathers and runs chunk tasks' jobs; None (and no cost) when no task has chunks.
        self.chunker = (Chunker(ChunkCall(self.executor), self.executor, self._chunk_done)
                        if chunk_tasks(registry.tasks) else None)
        start: Callable[[Job, Producer], None] = (
            self._start if self.chunker is None else self._start_any)
        #: Under the supervisor with a hard limit: its pipe (see hardlimit), told each lease.
        self.watchdog = Watchdog.from_env() if config.hard_timeout_grace else None
        self._handoff = read_handoff() if self.watchdog is not None else None
        if self.watchdog is not None:
            self.watchdog.say(f"N{self.node_id}\n")
            start = self.watchdog.starting(start)
        self.producers = {
            queue: Producer(storage, queue, limit, self.node_id, config.lease_ttl,
                            config.fetch_limit, start, self.admission.admit,
                            config.labels, config.tasks, claim_ahead=True)
            for queue, limit in config.queues.items()
        }
        for producer in self.producers.values():
            producer.unacked = self._unacked
        self.services = self._services(registry, observed, config)
        storage.on_outcome(self.metrics.finished_many)
        self.completed = 0
        #: Why this worker asked to be replaced (the Recycler), else None.
        self.recycled: str | None = None
        self._at_once = False
        self._recycle_after = config.max_jobs_per_child
        if (config.max_jobs_per_child or config.max_memory_per_child
                or config.hard_timeout_grace):
            self.executor.hard.grace = config.hard_timeout_grace
            self.executor.hard.watchdog = self.watchdog
            self.services.append(Recycler(
                self.executor.hard.overdue, self.recycle, max_memory=config.max_memory_per_child))

    def _services(self, registry: Registry, observed: ObservedStorage,
                  config: WorkerConfig) -> list[Service]:
        """Every background service, in start order; each runs the same lifecycle."""
        storage = self._storage
        self.heartbeat = Heartbeat(storage, self.node_id, config.queues,
                                   lambda: list(self._executions.values()),
                                   config.heartbeat_interval, config.lease_ttl,
                                   list(registry.tasks), node_ttl=config.node_ttl,
                                   labels=config.labels, version=registry.config.version,
                                   serves=config.tasks)
        self.progress = ProgressFlusher(
            storage, lambda: [ex.ctx._progress for ex in self._executions.values()],
            config.progress_interval)
        self.settings = QueueSettings(storage, self.node_id, self.producers,
                                      config.settings_interval, self.executor.queue_backoffs)
        self.cooldowns = Cooldowns(storage, self.producers, config.settings_interval)
        self.leader = LeaderElector(storage, self.node_id, config.leader_ttl)
        self.cron = CronScheduler(registry, observed.with_source("cron"), self.leader,
                                  config.cron_interval)
        self.rescuer = Rescuer(observed.with_source("rescuer"),
                               min(config.rescue_interval, config.lease_ttl / 2))
        self.stager = Stager(observed.with_source("stager"), config.stage_interval)
        self.pruner = Pruner(storage, self.leader, config.prune_interval,
                             config.completed_retention, config.discarded_retention)
        self.expirer = Expirer(observed.with_source("expirer"), self.leader,
                               config.expire_interval)
        self.archiver = Archiver(storage, self.leader, config.archive_interval,
                                 config.archive_after)
        self.vacuumer = Vacuumer(storage, self.leader, VacuumConfig(
            config.vacuum_interval, config.vacuum_dead_rows))
        self.metrics = Metrics(storage, self.leader, config.metrics_interval,
                               config.metrics_retention, self.acker.drain)
        return [self.heartbeat, self.progress, self.settings, self.cooldowns, self.leader,
                self.cron, self.rescuer, self.stager, self.expirer, self.archiver, self.pruner,
                self.vacuumer, self.metrics]

    # -- executions ----------------------------------------------------------------------

    def _start(self, job: Job, producer: Producer) -> None:
        """Called by the producer for each job it claimed, inside its loop over them: on
        Python 3.12+ a handler that does not await runs to its end here (eagerly, under
        a Task of its own) and gives its slot back before the next job starts."""
        ex = Execution(job, JobContext(job, _shutdown=self.shutdown_signal,
                                       _meta_cap=self._meta_cap, _node=self.node))
        self._executions[job.id] = ex
        ex.task = spawn(self._run_execution(ex, producer))

    def _start_any(self, job: Job, producer: Producer) -> None:
        """``_start`` of a worker with chunk tasks: a chunk task's job goes to the
        chunker; a job that would take a slot above the queue's limit (claimed for a
        chunk's room) goes back at once, its attempt returned."""
        chunker = self.chunker
        assert chunker is not None
        task = self.registry.tasks.get(job.task)
        chunked = task is not None and task.defaults.chunk is not None
        if producer.running > producer.limit and not (
                chunked and chunker.joins(job.task, producer)):
            producer.running -= 1
            chunker.no_room(producer)
            assert job.lease_token is not None
            self.acker.push(make_ack(id=job.id, lease_token=job.lease_token,
                                     state=JobState.AVAILABLE, delay=0.0, attempt_delta=-1,
                                     run_time=0.0))
            return
        if not chunked:
            self._start(job, producer)
            return
        assert task is not None
        ex = Execution(job, JobContext(job, _shutdown=self.shutdown_signal,
                                       _meta_cap=self._meta_cap))
        self._executions[job.id] = ex
        chunker.add(ex, task, producer)

    def _chunk_done(self, ex: Execution, ack: JobAck | None, producer: Producer) -> None:
        """One job of a chunk ended (``_run_execution``'s tail, without the slot: the
        chunker gives the chunk's slot back once)."""
        if ex.throttle is not None:
            if ex.throttle_scope == "queue":
                self.cooldowns.raised(producer.queue, ex.throttle)
            else:
                producer.hold(ex.throttle)
        if ack is None:
            self._drop(ex.job.id)
        else:
            self._push(ack)

    async def _run_execution(self, ex: Execution, producer: Producer) -> None:
        try:
            ack = await self.executor.execute(ex)
        except BaseException as exc:  # a bug of ours, not of the handler
            log.exception("execution of job %d crashed: %s", ex.job.id, exc)
            # the attempt still ends, with this error: never a job left "running"
            ack = self.executor.crashed(ex, exc)
        finally:
            producer.finished()
        if ex.throttle is not None:
            if ex.throttle_scope == "queue":
                self.cooldowns.raised(producer.queue, ex.throttle)
            else:
                producer.hold(ex.throttle)
        if ack is None:
            self._drop(ex.job.id)
        else:
            try:
                if ex.ctx._progress is not None and self.progress.must_flush(ex.ctx._progress):
                    await self.progress.flush_job(ex.ctx._progress)  # the last report first
            except Exception as exc:  # a lost progress report must not lose the outcome
                log.warning("last progress of job %d not written: %s", ex.job.id, exc)
            finally:
                self._push(ack)

    def _push(self, ack: JobAck) -> None:
        """Queue an outcome for its write; one that returns later (a backoff, a snooze, a
        job waiting for a limit) is staged when due, not at the stager's next pass."""
        self.acker.push(ack)
        if ack.delay is not None and ack.state is not JobState.AVAILABLE:
            self.stager.stage_in(ack.delay)

    def _drop(self, job_id: int) -> None:
        """An attempt that ends without an outcome to write (its lease was lost)."""
        self._executions.pop(job_id, None)
        if self.watchdog is not None:
            self.watchdog.settled((job_id,))

    def _on_flushed(self, acks: list[JobAck], applied: set[int]) -> None:
        forget = self._executions.pop  # metrics and listeners saw them, in the observed storage
        for ack in acks:
            forget(ack.id, None)
        if self.watchdog is not None:
            self.watchdog.settled(ack.id for ack in acks)
        if len(applied) < len(acks):  # applied holds ids of acks only: some were refused
            for ack in acks:
                if ack.id not in applied:
                    log.warning("outcome of job %d rejected by the fence (lease lost)", ack.id)
        self.completed += len(applied)
        if self._recycle_after is not None and self.completed >= self._recycle_after:
            self._recycle_after = None  # once
            self.recycle(f"max_jobs_per_child: {self.completed} jobs finished")
        for producer in self.producers.values():  # a claim may have waited for this flush
            producer.wake()

    def _unacked(self) -> int:
        """Attempts that ended and wait for their outcome to be written."""
        held = self.chunker.held if self.chunker is not None else 0
        return len(self._executions) - sum(p.running for p in self.producers.values()) - held

    # -- lifecycle ---------------------------------------------------------------------------

    def _on_wake(self, queue: str) -> None:
        def wake() -> None:
            if queue == "*":
                for producer in self.producers.values():
                    producer.wake()
            elif queue in self.producers:
                self.producers[queue].wake()

        if threading.get_ident() == self._loop_thread:  # PostgreSQL's listener: this loop
            wake()
            return
        with contextlib.suppress(RuntimeError):  # loop closed while a thread notifies
            self._loop.call_soon_threadsafe(wake)

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        unsubscribe = self._storage.wake_subscribe(self._on_wake)
        restore: Callable[[], None] | None = None
        begun: list[Service] = []  # services whose start() ran (all at once): to stop
        # Every way out after the subscription undoes it, a failed start (the database
        # down) too: no signal handlers left installed, no wake-up subscriber leaked.
        try:
            restore = install_stop_signals(self.request_stop)
            begun = self.services
            await self._start_services()
            if self._handoff is not None:  # a child killed at a hard time limit: before claims
                try:
                    for ack in await settle(self._handoff, self._storage, self.executor,
                                            self._executions):
                        self._push(ack)
                except Exception as exc:  # the rescuer brings them back when their leases expire
                    log.error("could not settle the jobs of the killed process: %s", exc)
                await self.acker.run_once()
            log.info("worker %s started on queues %s", self.node_id, dict(self.config.queues))
            self.started.set()
            async with asyncio.TaskGroup() as group:
                # the claims first: the services' passes do not delay the first jobs
                self._claiming = [group.create_task(producer.run(self._stopping))
                                  for producer in self.producers.values()]
                group.create_task(self.acker.run(self._services_stop))
                for service in self.services:
                    group.create_task(service.run(self._services_stop))
                if self.config.burst:
                    group.create_task(self._watch_burst())
                group.create_task(self._shutdown_when_stopping())
        finally:
            unsubscribe()
            if restore is not None:
                restore()
            self.executor.shutdown()
            for service in reversed(begun):
                try:
                    await service.stop()
                except Exception as exc:  # the database may be away at exit: logged, not raised
                    log.warning("%s did not stop cleanly: %s", service.name, exc)
        log.info("worker %s stopped", self.node_id)

    async def _start_services(self) -> None:
        """Every service's ``start()``, at the same time (they are independent, and each
        is a round trip or two): the first claim waits for the slowest, not the sum. The
        first failure is raised as it is, the other starts cancelled and waited for, so
        that no start still runs when ``run()`` stops the services."""
        starts = [asyncio.ensure_future(service.start()) for service in self.services]
        try:
            await asyncio.gather(*starts)
        except BaseException:
            for start in starts:
                start.cancel()
            await asyncio.gather(*starts, return_exceptions=True)
            raise
