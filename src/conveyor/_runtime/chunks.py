"""Running a chunk task's jobs together: one handler call, one outcome per job.

``ChunkCall`` calls the handler with the decoded jobs and turns what it returned (or
raised) into each job's fenced outcome, through the executor's own outcome rules, so
each job keeps its attempts, retry policy and events. The worker's ``Chunker`` gathers
claimed jobs into chunks; the testing toolkit's drain uses ``ChunkCall`` alone.

Claiming: a chunk task uses the queue's existing claim. A gathering chunk counts as one
running job of its queue (the handler runs once), and its free room is added to the
producer's claim size (``Producer.room``), so a queue started with ``-c 1`` still
fills chunks of 100 in one round trip. A job so claimed that is not for the open
chunk and would run above the queue's limit is given back at once, its attempt
returned. A per-task claim would need a claim variant per backend for the same effect.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Mapping
from typing import Any

from .. import _payload
from .._chunk import ChunkJob, ChunkResult
from .._errors import Cancel, Discard, Snooze, TaskTimedOut, Throttle
from .._job import JobState
from .._payload_types import ArgumentsError
from .._storage import JobAck
from .._task import Task
from .executor import MAX_DELAY, Execution, Executor, _cancelled_from_outside
from .hardlimit import run_in_thread
from .producer import Producer

#: One job's end: (result, None) when it completed, (None, exception) when it failed.
Outcome = tuple[Any, BaseException | None]


class ChunkCall:
    """Calls a chunk handler once and builds the outcome of each of its jobs."""

    def __init__(self, executor: Executor) -> None:
        self._x = executor

    async def run(self, task: Task[Any, Any], members: list[Execution]) -> dict[int, JobAck]:
        """Each member's outcome by job id (one the handler never saw, because its
        arguments could not be decoded, included)."""
        x, acks = self._x, {}
        ready: list[Execution] = []
        items: list[ChunkJob] = []
        for ex in members:
            job = ex.job
            try:
                if not isinstance(job.args, list) or not isinstance(job.kwargs, dict):
                    raise ArgumentsError("job args must be a JSON array and kwargs a JSON "
                                         "object", permanent=True)
                args, kwargs = task.call_arguments(job.args, job.kwargs)
            except ArgumentsError as exc:
                acks[job.id] = x._unreadable(ex, task, exc)
                continue
            ready.append(ex)
            items.append(ChunkJob(job.id, tuple(args), dict(kwargs), job.attempt))
        if not ready:
            return acks
        try:
            outcomes = per_job(task.name, await self._call(task, items), ready)
        except asyncio.CancelledError as exc:
            if _cancelled_from_outside():
                raise
            outcomes = {ex.job.id: (None, exc) for ex in ready}
        except BaseException as exc:  # raised (or returned nonsense): every job fails
            outcomes = {ex.job.id: (None, exc) for ex in ready}
        for ex in ready:
            try:
                ack = self.settle(ex, task, *outcomes[ex.job.id])
            except Exception as err:  # e.g. a result too large to store
                ack = x.crashed(ex, err)
            if ack is not None:
                acks[ex.job.id] = ack
        return acks

    async def _call(self, task: Task[Any, Any], items: list[ChunkJob]) -> Any:
        """The handler on the loop (async) or in the executor's threads (sync), under
        the task's timeout, which covers the whole chunk."""
        timeout = task.defaults.timeout
        if task.is_async:
            if timeout is None:
                return await task.fn(items)
            try:
                async with asyncio.timeout(timeout) as scope:
                    return await task.fn(items)
            except TimeoutError:
                if scope.expired():
                    raise TaskTimedOut from None
                raise
        # the same hard limit as one job's sync handler: every job of the chunk is watched
        return await run_in_thread(self._x._pool, self._x.hard, functools.partial(task.fn, items),
                                   [item.id for item in items], timeout, _nothing)

    def settle(self, ex: Execution, task: Task[Any, Any], value: Any,
               exc: BaseException | None) -> JobAck | None:
        """One job's outcome, by the rules of ``Executor._outcome`` for one handler."""
        x = self._x
        if exc is None:
            cfg = x._registry.config
            return x._ack(ex, JobState.COMPLETED, result_json=_payload.encode_result(
                value, cfg.max_result_bytes, task.codec))
        if isinstance(exc, Snooze):
            state = JobState.SCHEDULED if exc.seconds > 0 else JobState.AVAILABLE
            return x._ack(ex, state, delay=min(exc.seconds, MAX_DELAY), attempt_delta=-1)
        if isinstance(exc, Throttle):
            ex.throttle, ex.throttle_scope = min(exc.retry_after, MAX_DELAY), exc.scope
            state = JobState.SCHEDULED if exc.retry_after > 0 else JobState.AVAILABLE
            return x._ack(ex, state, delay=ex.throttle, attempt_delta=-1)
        if isinstance(exc, Cancel):
            return x._ack(ex, JobState.CANCELLED, error_json=x._error(ex, f"cancelled: {exc.reason}"))
        if isinstance(exc, Discard):
            return x._ack(ex, JobState.DISCARDED, error_json=x._error(ex, f"discarded: {exc.reason}"))
        if isinstance(exc, TaskTimedOut):
            return x._timed_out(ex, task)
        return x._raised(ex, task, exc)


def per_job(task: str, returned: Any, ready: list[Execution]) -> dict[int, Outcome]:
    """What the handler returned, job by job; raises ``TypeError`` (failing them all)
    for a list of the wrong length or a ``ChunkResult`` naming jobs not in the chunk."""
    ids = [ex.job.id for ex in ready]
    if isinstance(returned, ChunkResult):
        unknown = sorted({*returned.failed, *returned.results} - set(ids), key=str)
        if unknown:
            raise TypeError(f"chunk task {task!r} returned a ChunkResult naming job(s) "
                            f"{unknown[:10]} that are not in its chunk of {len(ids)}")
        return {i: (None, returned.failed[i]) if i in returned.failed
                else (returned.results.get(i), None) for i in ids}
    if isinstance(returned, list | tuple) and len(returned) == len(ids):
        return {i: (value, None) for i, value in zip(ids, returned, strict=True)}
    got = (f"a {type(returned).__name__} of {len(returned)}"
           if isinstance(returned, list | tuple) else f"{type(returned).__name__}")
    raise TypeError(f"chunk task {task!r} returned {got}; it must return a list of "
                    f"{len(ids)} results (one per job, in the order given) or a "
                    "conveyor.ChunkResult")


class _Open:
    """A chunk of one task and queue, gathering, then running."""

    __slots__ = ("fired", "future", "members", "offers", "pending", "producer", "runner",
                 "task", "timer")

    def __init__(self, task: Task[Any, Any], producer: Producer) -> None:
        self.task, self.producer = task, producer
        self.members: list[Execution] = []
        self.future: asyncio.Future[dict[int, JobAck]] = asyncio.get_running_loop().create_future()
        self.timer: asyncio.TimerHandle | None = None
        self.runner: asyncio.Task[None] | None = None
        self.fired = False
        self.pending = 0  # members whose outcome is not pushed yet
        self.offers = 0  # room this chunk adds to its producer's claims


class Chunker:
    """A worker's chunks: gathers claimed jobs of chunk tasks, runs each chunk once it
    is full or its ``wait`` is over, and hands each job's outcome to ``push``."""

    def __init__(self, call: ChunkCall, executor: Executor,
                 push: Callable[[Execution, JobAck | None, Producer], None]) -> None:
        self._call, self._x, self._push = call, executor, push
        self._open: dict[tuple[str, str], _Open] = {}
        #: Members beyond one per live chunk: the producer counts a chunk as one job.
        self.held = 0

    def joins(self, task: str, producer: Producer) -> bool:
        """A job of ``task`` claimed by ``producer`` would join a gathering chunk."""
        return (task, producer.queue) in self._open

    def add(self, ex: Execution, task: Task[Any, Any], producer: Producer) -> None:
        """Take a claimed job (the producer counted it running): it joins the open chunk
        of its task and queue, or opens one (which keeps that count as its slot)."""
        assert task.defaults.chunk is not None
        size, key = task.defaults.chunk.size, (task.name, producer.queue)
        chunk = self._open.get(key)
        if chunk is None:
            chunk = self._open[key] = _Open(task, producer)
            chunk.offers = size - 1
            producer.room += chunk.offers
            chunk.timer = asyncio.get_running_loop().call_later(
                task.defaults.chunk.wait, self.fire, chunk)
            producer.wake()  # claim again at once, for the room
        else:
            producer.running -= 1
            self.held += 1
            if chunk.offers:
                chunk.offers -= 1
                producer.room -= 1
        chunk.members.append(ex)
        chunk.pending += 1
        ex.task = asyncio.ensure_future(self._member(ex, chunk))
        if len(chunk.members) >= size:
            self.fire(chunk)

    def no_room(self, producer: Producer) -> None:
        """A claim for room brought other jobs: stop claiming for room on this queue
        (the open chunks fill from the queue's ordinary claims)."""
        for chunk in self._open.values():
            if chunk.producer is producer:
                producer.room -= chunk.offers
                chunk.offers = 0

    def fire(self, chunk: _Open) -> None:
        """Run the chunk now (full, its wait over, or the worker stopping)."""
        if chunk.fired:
            return
        chunk.fired = True
        if chunk.timer is not None:
            chunk.timer.cancel()
        chunk.producer.room -= chunk.offers
        chunk.offers = 0
        self._open.pop((chunk.task.name, chunk.producer.queue), None)
        members = [ex for ex in chunk.members if ex.stop_reason is None]
        chunk.runner = asyncio.ensure_future(self._run(chunk, members))

    def fire_all(self) -> None:
        for chunk in list(self._open.values()):
            self.fire(chunk)

    async def _run(self, chunk: _Open, members: list[Execution]) -> None:
        try:
            acks = await self._call.run(chunk.task, members) if members else {}
        except asyncio.CancelledError:
            chunk.future.cancel()
            raise
        except BaseException as exc:  # a bug of ours: each member fails with it
            chunk.future.set_exception(exc)
        else:
            chunk.future.set_result(acks)

    async def _member(self, ex: Execution, chunk: _Open) -> JobAck | None:
        """One job of a chunk: waits for the chunk's outcomes and takes its own; a stop
        (cancel, shutdown, lost lease) ends this job alone, as for any job."""
        ack: JobAck | None
        try:
            acks = await asyncio.shield(chunk.future)
            ack = acks.get(ex.job.id)
            if ack is None and ex.stop_reason is None:
                ack = self._x.crashed(ex, RuntimeError("the chunk gave no outcome for this job"))
        except asyncio.CancelledError:
            if ex.stop_reason is None:
                raise
            ack = self._x._stopped(ex)
        except Exception as exc:
            ack = self._x.crashed(ex, exc)
        finally:
            ex.run_time = time.monotonic() - ex.started
            self._left(chunk)
        self._push(ex, ack, chunk.producer)
        return ack

    def _left(self, chunk: _Open) -> None:
        chunk.pending -= 1
        if chunk.pending:
            self.held -= 1
            return
        if not chunk.fired:  # every member stopped while gathering
            self.fire(chunk)
        chunk.producer.finished()
        if chunk.runner is not None and not chunk.runner.done():
            chunk.runner.cancel()  # no job waits for it any more


def _nothing() -> None:
    """A chunk's timeout: its members' handlers see no ``cancelled`` (none is current)."""


def chunk_tasks(tasks: Mapping[str, Task[Any, Any]]) -> bool:
    """True when any task runs in chunks (the worker then routes claims through
    ``Chunker``; otherwise it starts every job as before, at no cost)."""
    return any(t.defaults.chunk is not None for t in tasks.values())
