"""Running jobs in the caller, one at a time: the testing toolkit's inline mode and
``app.drain()``.

It is made of the worker's own parts: claims through a ``Producer`` and its
``Admission`` (rate and concurrency limits), the ``Executor`` (middleware, context,
timeouts, and the outcome of return, raise, Snooze, Cancel, Discard, Throttle), fenced
outcomes written through the observed storage attributed to "worker" (so state-change
events and hooks fire as in production), the ``Stager`` and the ``CronScheduler``. It
reads the queues' live settings as a worker's ``QueueSettings`` and ``Cooldowns`` do:
a paused queue runs nothing, a queue's default backoff times its retries, a
``Throttle`` holds its queue (``scope="queue"``: a cool-down written for every worker)
and a queue cooling down is left alone. What it leaves out is the timing a long-lived
worker needs (polling, heartbeats, a burst worker's quiet period): it claims one job,
runs it, writes its outcome, then claims the next, so a drain is deterministic and
stops at once when nothing is left (or only held queues are).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, MutableMapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from .._context import JobContext
from .._errors import THROTTLE_COOLDOWN_CAP
from .._job import Job, JobState
from .._limits import RateLimit
from .._observed import ObservedStorage
from .._registry import Registry
from .._routing import satisfies
from .._storage import (
    JobAck,
    JobAckManyParams,
    JobChanged,
    JobClaimOneParams,
    JobFilter,
    JobSearchParams,
    QueueCooldownRaiseParams,
    QueueRow,
    Storage,
)
from .._task import Task
from .._task_retry import parse_queue_backoff
from .admission import Admission
from .chunks import ChunkCall
from .cron import CronScheduler
from .drain_result import MAX_SKIPPED_LISTED, DrainResult, Outcome, outcome_of
from .executor import Execution, Executor
from .expirer import Expirer, expired_ack, is_expired
from .producer import Producer
from .progress import ProgressFlusher
from .stager import Stager

log = logging.getLogger("conveyor.worker")

#: A drain that ran this many attempts is stuck (a job that snoozes for ever?).
MAX_DRAIN_ATTEMPTS = 1_000


class InProcessRunner:
    """Claims, runs and acknowledges jobs one at a time in the caller's event loop."""

    def __init__(self, registry: Registry, storage: Storage, lease_ttl: float = 300.0,
                 holds: MutableMapping[str, datetime] | None = None, *,
                 labels: Mapping[str, str] | None = None,
                 tasks: Sequence[str] | None = None) -> None:
        observed = storage if isinstance(storage, ObservedStorage) else ObservedStorage(
            storage, registry.hooks)
        self.node_id = f"inprocess-{uuid.uuid4().hex[:12]}"
        self._lease_ttl = lease_ttl
        self._executions: dict[int, Execution] = {}
        self._storage = observed.with_source("worker", node=self.node_id,
                                             attempts=self._executions.get)
        self.executor = Executor(registry, 4, self.node_id)
        self._max_meta_bytes = registry.config.max_payload_bytes
        self.progress = ProgressFlusher(
            self._storage, lambda: [ex.ctx._progress for ex in self._executions.values()], 0.5)
        self._held: list[JobAck] = []
        self.admission = Admission(registry.tasks, self._storage, self._held.append)
        self.stager = Stager(observed.with_source("stager"), 1.0)
        self.expirer = Expirer(observed.with_source("expirer"), None, 1.0)
        self.cron = CronScheduler(registry, observed.with_source("cron"), None)
        self._producers: dict[str, Producer] = {}
        self._ready: list[Job] = []
        self._registry = registry
        #: One job per claim, or a chunk's worth when a task runs in chunks (the claim's
        #: size then comes from ``Producer.room``, 0 for every other job).
        self._fetch = max([t.defaults.chunk.size for t in registry.tasks.values()
                           if t.defaults.chunk is not None], default=1)
        self._claimed: dict[int, Job] = {}
        #: Until when (database clock) a ``Throttle`` (node scope) holds each queue: a
        #: worker holds its producer as long. Kept by the app across drains.
        self._holds: MutableMapping[str, datetime] = {} if holds is None else holds
        #: The queues' live settings, read by ``load_settings``.
        self._rows: dict[str, QueueRow] = {}
        #: True when time is skipped (``include_scheduled``): holds and cool-downs too.
        self.timeless = False
        #: Which jobs its claims take, as a worker with these --label and --tasks.
        self._labels = dict(labels or {})
        self._tasks = None if tasks is None else tuple(tasks)

    def close(self) -> None:
        self.executor.shutdown()

    # -- the rules a worker applies --------------------------------------------------------

    async def load_settings(self) -> None:
        """Read the queues' live settings: pause and rate limit (``_producer``) and each
        queue's default backoff for the executor, as a worker's ``QueueSettings`` does."""
        self._rows = {q.name: q for q in await self._storage.queue_list()}
        self.executor.queue_backoffs.clear()
        for name, row in self._rows.items():
            if row.backoff is None:
                continue
            try:
                self.executor.queue_backoffs[name] = parse_queue_backoff(row.backoff)
            except ValueError as exc:  # as on a worker: ignored, the built-in one applies
                log.warning("queue %r: ignoring its backoff: %s", name, exc)

    async def waiting(self, queue: str) -> str | None:
        """Why a worker would claim nothing from ``queue`` now, or None: paused, held by a
        ``Throttle`` of its task, or cooling down after a ``Throttle(scope="queue")``
        (written by any worker). ``timeless`` skips the last two, as it skips delays."""
        row = self._rows.get(queue)
        if row is not None and row.paused:
            return "paused"
        if self.timeless:
            return None
        until = self._holds.get(queue)
        if until is not None and until > await self._storage.clock_now():
            return "held by a Throttle"
        for cooling in await self._storage.queue_cooldown_list():
            if cooling.queue == queue and cooling.active:
                return "cooling down"
        return None

    async def _throttled(self, queue: str, ex: Execution) -> None:
        """After a ``Throttle``: hold the queue (node scope) or write its cool-down for
        every worker (queue scope), as ``Worker._run_execution`` does."""
        if ex.throttle is None or ex.throttle <= 0:
            return
        if ex.throttle_scope == "queue":
            await self._storage.queue_cooldown_raise(
                QueueCooldownRaiseParams(queue, ex.throttle, THROTTLE_COOLDOWN_CAP))
            return
        until = await self._storage.clock_now() + timedelta(seconds=ex.throttle)
        self._holds[queue] = max(until, self._holds.get(queue, until))

    # -- one job -------------------------------------------------------------------------

    async def claim(self, job_id: int, *, early: bool = False) -> Job | None:
        """Claim one chosen job (inline mode); ``early`` takes it before it is due."""
        return await self._storage.job_claim_one(
            JobClaimOneParams(job_id, self.node_id, self._lease_ttl, early))

    async def run(self, job: Job) -> Outcome | None:
        """Run a claimed job and write its outcome; None if the fence refused it. A job
        of a chunk task runs as a chunk of one (inline mode)."""
        if is_expired(job):  # as admission does on a worker: never run
            expired = expired_ack(job)
            done = await self._storage.job_ack_many(JobAckManyParams([expired], self.node_id))
            return outcome_of(job, expired) if done else None
        task = self._registry.tasks.get(job.task)
        if task is not None and task.defaults.chunk is not None:
            outcomes = await self.run_chunk(task, [job])
            return outcomes[0] if outcomes else None
        ctx = JobContext(job, _meta_cap=self._max_meta_bytes)
        ex = self._executions[job.id] = Execution(job, ctx)
        try:
            ack = await self.executor.execute(ex)
            await self._throttled(job.queue, ex)
            if ack is None:
                return None
            await self.progress.flush_job(ctx._progress)  # as a worker does: the last report first
            applied = await self._storage.job_ack_many(JobAckManyParams([ack], self.node_id))
        finally:
            self._executions.pop(job.id, None)
        return outcome_of(job, ack) if applied else None

    async def run_chunk(self, task: Task[Any, Any], jobs: list[Job]) -> list[Outcome]:
        """Run claimed jobs of a chunk task in one handler call (``ChunkCall``) and write
        their outcomes in one flush; the outcomes the fence applied, in order."""
        members = [Execution(job, JobContext(job, _meta_cap=self._max_meta_bytes))
                   for job in jobs]
        self._executions.update((ex.job.id, ex) for ex in members)
        try:
            acks = await ChunkCall(self.executor).run(task, members)
            for ex in members:
                await self._throttled(ex.job.queue, ex)
            written = [acks[job.id] for job in jobs if job.id in acks]
            applied = set(await self._storage.job_ack_many(
                JobAckManyParams(written, self.node_id))) if written else set()
        finally:
            for job in jobs:
                self._executions.pop(job.id, None)
        return [outcome_of(job, acks[job.id]) for job in jobs if job.id in applied]

    async def _gather(self, producer: Producer, first: Job, task: Task[Any, Any],
                      result: DrainResult, cap: int) -> list[Job]:
        """``first`` and up to ``cap`` - 1 more claimed jobs of its task, as a worker's
        chunk gathers them (claims sized by ``Producer.room``); other jobs so claimed
        stay in line."""
        def take(room: int) -> list[Job]:
            mine = [j for j in self._ready if j.task == first.task][:room]
            self._ready[:] = [j for j in self._ready if j not in mine]
            return mine

        members = [first, *take(cap - 1)]
        while len(members) < cap:
            producer.room = cap - len(members)
            before = len(self._ready)
            try:
                await producer.run_once()
            finally:
                producer.room = 0
            await self._write_held(result)
            if len(self._ready) == before:
                break
            members += take(cap - len(members))
        return members

    # -- drain -----------------------------------------------------------------------------

    async def drain(self, queues: Sequence[str] | None, max_jobs: int | None,
                    include_scheduled: bool, cron: bool) -> DrainResult:
        """Run every due job of ``queues`` (None: every queue) until none is left."""
        result = DrainResult()
        self.timeless = include_scheduled
        if cron:
            await self.cron.start()
            await self.cron.run_once()
        while max_jobs is None or len(result) < max_jobs:
            await self.load_settings()  # live, as a worker reads them every interval
            expired = await self.expirer.run_once()  # before staging: they never run
            await self.stager.run_once()
            if include_scheduled:
                wanted: Sequence[str | None] = queues if queues is not None else [None]
                for queue in wanted:
                    await self._storage.job_stage_early(queue=queue)
            ran = await self._expired(expired, queues, result)
            for queue in queues if queues is not None else await self._ready_queues():
                ran += await self._drain_queue(queue, result, max_jobs)
            if not ran:
                break
        result.skipped = await self._skipped(queues)
        return result

    async def _skipped(self, queues: Sequence[str] | None) -> list[Job]:
        """Available jobs of ``queues`` its claims leave (labels, tasks), oldest first."""
        names = queues if queues is not None else await self._ready_queues()
        out: list[Job] = []
        for queue in names:
            found = await self._storage.job_search(JobSearchParams(
                JobFilter(states=(JobState.AVAILABLE,), queue=queue), limit=MAX_SKIPPED_LISTED))
            out += [j for j in found if not satisfies(self._labels, j.requires)
                    or (self._tasks is not None and j.task not in self._tasks)]
        return sorted(out, key=lambda j: j.id)[:MAX_SKIPPED_LISTED]

    async def _expired(self, changed: list[JobChanged], queues: Sequence[str] | None,
                       result: DrainResult) -> int:
        """The expirer's cancels of the drained queues, as outcomes (kind "cancelled")."""
        ran = 0
        for c in changed:
            if queues is None or c.queue in queues:
                job = await self._storage.job_get(c.id)
                if job is not None:
                    error = job.errors[-1].get("error") if job.errors else None
                    result.outcomes.append(Outcome(job, "cancelled", JobState.CANCELLED,
                                                   None, error))
                    ran += 1
        return ran

    async def _ready_queues(self) -> list[str]:
        counts = await self._storage.job_count_by_queue()
        return sorted({c.queue for c in counts
                       if c.queue is not None and c.state is JobState.AVAILABLE and c.n})

    async def _drain_queue(self, queue: str, result: DrainResult, max_jobs: int | None) -> int:
        producer = await self._producer(queue)
        ran = 0
        while max_jobs is None or len(result) < max_jobs:
            if len(result) + len(result.held) >= MAX_DRAIN_ATTEMPTS:
                last = result.outcomes[-1] if result.outcomes else None
                raise RuntimeError(
                    f"drain stopped after {MAX_DRAIN_ATTEMPTS} attempts (the last: "
                    f"{last.task if last else '?'} {last.kind if last else ''}): a job that "
                    "snoozes for ever? Pass max_jobs= to run a bounded number")
            if await self.waiting(queue) is not None:
                return ran  # a worker would wait: the rest of this queue stays
            await producer.run_once()
            await self._write_held(result)
            if producer.idle and not self._ready:  # nothing claimed, nothing held back
                return ran
            while self._ready:
                job = self._ready.pop(0)
                task = self._registry.tasks.get(job.task)
                if task is not None and task.defaults.chunk is not None:
                    ran += await self._drain_chunk(producer, job, task, result, max_jobs)
                    continue
                try:
                    outcome = await self.run(job)
                finally:
                    producer.finished()
                if outcome is not None:
                    result.outcomes.append(outcome)
                    ran += 1
        return ran

    async def _drain_chunk(self, producer: Producer, job: Job, task: Task[Any, Any],
                           result: DrainResult, max_jobs: int | None) -> int:
        """One chunk of ``task``, gathered from ``job`` on (within ``max_jobs``)."""
        assert task.defaults.chunk is not None
        cap = task.defaults.chunk.size
        if max_jobs is not None:
            cap = max(1, min(cap, max_jobs - len(result)))
        members = await self._gather(producer, job, task, result, cap)
        try:
            outcomes = await self.run_chunk(task, members)
        finally:
            for _ in members:
                producer.finished()
        result.outcomes.extend(outcomes)
        return len(outcomes)

    async def _producer(self, queue: str) -> Producer:
        """One job at a time, under the queue's live settings (pause, rate limit)."""
        producer = self._producers.get(queue)
        if producer is None:
            producer = self._producers[queue] = Producer(
                self._storage, queue, 1, self.node_id, self._lease_ttl, self._fetch,
                lambda job, _: self._ready.append(job), self._admit, self._labels, self._tasks,
                fair_probe_interval=0.0)  # every claim: drain() takes turns at once
        row = self._rows.get(queue)
        rate = RateLimit(row.rate_limit) if row is not None and row.rate_limit else None
        producer.apply(paused=bool(row and row.paused), limit=1, rate_limit=rate)
        return producer

    async def _admit(self, jobs: list[Job], producer: Producer) -> list[Job]:
        self._claimed = {job.id: job for job in jobs}
        return await self.admission.admit(jobs, producer)

    async def _write_held(self, result: DrainResult) -> None:
        """Jobs admission refused go back to wait (attempt given back), as on a worker."""
        if not self._held:
            return
        held = list(self._held)
        self._held.clear()
        applied = set(await self._storage.job_ack_many(JobAckManyParams(held, self.node_id)))
        for ack in held:
            job = self._claimed.get(ack.id)
            if job is None:
                continue
            if ack.state is JobState.CANCELLED:  # expired: cancelled, never run
                if ack.id in applied:
                    result.outcomes.append(outcome_of(job, ack))
            else:
                result.held.append(job)
