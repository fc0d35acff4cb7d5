"""Running one claimed job and turning what happened into a fenced outcome (JobAck)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import logging
import os
import random
import socket
import time
import traceback
from datetime import UTC, datetime
from typing import Any

from .. import _payload
from .._context import reset_current, set_current
from .._errors import Cancel, Discard, Snooze, TaskTimedOut, Throttle
from .._job import Job, JobState
from .._payload_types import DEFAULT_CODEC, ArgumentsError
from .._registry import Registry
from .._storage import JobAck, make_ack
from .._task import Task
from .._task_retry import QueueBackoff, discard_reason, task_delay
from .execution import Execution as Execution  # its home; still imported from here
from .hardlimit import HardLimit, run_in_thread

log = logging.getLogger("conveyor.job")
MAX_DELAY = _payload.MAX_DELAY_SECONDS

#: A job of a task this worker does not know goes back after at least this long ...
UNKNOWN_TASK_MIN_DELAY = 1.0
#: ... growing with the time it has waited, up to this (seconds).
UNKNOWN_TASK_MAX_DELAY = 60.0


def default_backoff(attempt: int) -> float:
    """Exponential with a floor: about 16 s, 31 s, 96 s, 4.5 min ... capped at one day."""
    return float(min(15 + attempt**4, 86_400))


def _cancelled_from_outside() -> bool:
    """True when this task was cancelled (``Task.cancel()``), not when a handler raised
    ``CancelledError`` of its own (e.g. from a future it awaited that was cancelled)."""
    current = asyncio.current_task()
    return current is not None and current.cancelling() > 0


class Executor:
    """Runs handlers: async ones on the loop, sync ones in a bounded thread pool."""

    def __init__(self, registry: Registry, threads: int, node: str | None = None, *,
                 unknown_task_timeout: float = 3600.0) -> None:
        self._registry = registry
        #: How long a job of a task no worker knows keeps waiting (rolling deploys).
        self._unknown_task_timeout = unknown_task_timeout
        #: Who ran an attempt, in each error entry: this worker's node, host and process.
        self._runner: dict[str, Any] = {"node": node, "host": socket.gethostname(),
                                        "pid": os.getpid()}
        self._pool = concurrent.futures.ThreadPoolExecutor(threads, "conveyor-job")
        self._fits: dict[tuple[str, int, tuple[str, ...]], str | None] = {}
        #: Each queue's live default backoff, kept current by the QueueSettings service.
        self.queue_backoffs: dict[str, QueueBackoff] = {}
        #: Hard time limit (hard_timeout_grace): its grace, the sync handlers past their
        #: soft timeout (watched by the Recycler) and, under the supervisor, its pipe,
        #: which hears each thread's hard deadline, so that a process too wedged to
        #: recycle itself (a handler in C code holding the GIL) is killed from outside.
        self.hard = HardLimit()

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _unfit(self, task: Task[Any, Any], args: list[Any], kwargs: dict[str, Any]) -> str | None:
        """Why these arguments cannot bind to the task's signature, or None. Binding only
        depends on how many positional arguments there are and the keywords' names, so
        the answer is cached per shape (about 3 µs saved per job)."""
        shape = (task.name, len(args), tuple(kwargs))
        if shape not in self._fits:
            if len(self._fits) >= 1024:
                self._fits.clear()
            try:
                task.signature.bind(*args, **kwargs)
                self._fits[shape] = None
            except TypeError as exc:
                self._fits[shape] = str(exc)
        return self._fits[shape]

    def _ack(self, ex: Execution, state: JobState, **fields: Any) -> JobAck:
        assert ex.job.lease_token is not None
        return make_ack(id=ex.job.id, lease_token=ex.job.lease_token, state=state,
                        run_time=time.monotonic() - ex.started, **fields)

    def _error(self, ex: Execution, message: str, tb: str | None = None) -> str:
        cfg = self._registry.config
        entry: dict[str, Any] = {
            "attempt": ex.job.attempt,
            "at": datetime.now(UTC).isoformat(),
            "error": _payload.truncate(message, cfg.max_error_chars),
            "run_time": round(time.monotonic() - ex.started, 6),
            **self._runner,
        }
        if tb:
            entry["traceback"] = _payload.truncate(tb, cfg.max_traceback_chars)
        return _payload.storable(_payload.dumps(entry))

    def _timed_out(self, ex: Execution, task: Task[Any, Any]) -> JobAck:
        """The attempt's failure at its task's timeout: a soft timeout (a job's, a
        chunk's) or a process killed at its hard limit (``handoff``)."""
        chunk = task.defaults.chunk is not None
        what = "chunk ran past its task's" if chunk else "task ran past its"
        msg = f"TimeoutError: {what} timeout of {task.defaults.timeout}s"
        return self._failure(ex, task, msg, "", TimeoutError(msg))

    def _failure(self, ex: Execution, task: Task[Any, Any], message: str, tb: str,
                 exc: BaseException | None = None) -> JobAck:
        job = ex.job
        error = self._error(ex, message, tb)
        why = self._policy_discard(task, exc)
        if why is not None:
            log.warning("job discarded: %s: %s", why, message[:500], extra=ex.log_extra())
            text = f"{why}; the attempt failed with {message}"
            return self._ack(ex, JobState.DISCARDED, error_json=self._error(ex, text, tb))
        if job.attempt >= job.max_attempts:
            log.warning("job discarded after %d attempts: %s", job.attempt, message[:500],
                        extra=ex.log_extra())
            return self._ack(ex, JobState.DISCARDED, error_json=error)
        delay = self._retry_delay(task, job, exc)
        log.info("job failed, retry in %.2fs: %s", delay, message[:500], extra=ex.log_extra())
        if not delay <= MAX_DELAY:  # a backoff of inf or nan waits as long as allowed
            delay = MAX_DELAY
        state = JobState.RETRYABLE if delay > 0 else JobState.AVAILABLE
        return self._ack(ex, state, delay=max(delay, 0.0), error_json=error)

    # -- retry policy (retry_on / discard_on / backoff): see conveyor._task_retry ----------

    @staticmethod
    def _policy_discard(task: Task[Any, Any], exc: BaseException | None) -> str | None:
        """Why the task's retry_on/discard_on end the job at once, or None."""
        opts = task.defaults
        if not opts.retry_on and not opts.discard_on:
            return None
        return discard_reason(opts.retry_on, opts.discard_on, exc)

    def _retry_delay(self, task: Task[Any, Any], job: Job, exc: BaseException | None) -> float:
        """The task's own backoff, else its queue's live default, else the built-in one."""
        opts = task.defaults
        try:
            delay = task_delay(opts.backoff, opts.backoff_takes_exception, job.attempt, exc)
        except Exception as err:  # a broken backoff must not lose the job: built-in one
            log.error("backoff of task %r raised %r; using the default backoff", task.name, err)
            delay = None
        if delay is not None:
            return delay
        queue_default = self.queue_backoffs.get(job.queue)
        if queue_default is not None:
            return queue_default.delay(job.attempt)
        return default_backoff(job.attempt) * random.uniform(0.9, 1.1)

    async def _call(self, ex: Execution, task: Task[Any, Any]) -> Any:
        timeout = task.defaults.timeout
        if task.is_async:
            if timeout is None:  # asyncio.timeout(None) costs more than a no-op handler
                return await task.fn(*ex.args, **ex.kwargs)
            try:
                async with asyncio.timeout(timeout) as scope:
                    return await task.fn(*ex.args, **ex.kwargs)
            except TimeoutError:
                if scope.expired():  # ours, not a TimeoutError the handler raised
                    raise TaskTimedOut from None
                raise
        ex.handler_is_async = False
        call = functools.partial(task.fn, *ex.args, **ex.kwargs)
        return await run_in_thread(self._pool, self.hard, call, [ex.job.id], timeout,
                                   ex.ctx._cancel.set)

    async def execute(self, ex: Execution) -> JobAck | None:
        """Run the job; return its outcome, or None when the lease was lost (no write)."""
        job = ex.job
        task = self._registry.tasks.get(job.task)
        if task is None:
            return self._unknown_task(ex)
        if not isinstance(job.args, list) or not isinstance(job.kwargs, dict):
            msg = "job args must be a JSON array and kwargs a JSON object"
            return self._ack(ex, JobState.DISCARDED, error_json=self._error(ex, msg))
        try:
            ex.args, ex.kwargs = task.call_arguments(job.args, job.kwargs)
        except ArgumentsError as exc:
            return self._unreadable(ex, task, exc)
        unfit = self._unfit(task, ex.args, ex.kwargs)
        if unfit is not None:
            msg = f"arguments no longer fit task {task.name!r}{task.signature}: {unfit}"
            log.error(msg, extra=ex.log_extra())
            return self._ack(ex, JobState.DISCARDED, error_json=self._error(ex, msg))
        token = set_current(ex.ctx)
        try:
            return await self._outcome(ex, task)
        except Exception as exc:  # finishing the attempt raised: it fails with that error
            return self.crashed(ex, exc)
        finally:
            reset_current(token)
            ex.run_time = time.monotonic() - ex.started

    async def _outcome(self, ex: Execution, task: Task[Any, Any]) -> JobAck | None:
        cfg = self._registry.config
        try:
            if self._registry.hooks.middleware:
                result = await self._registry.hooks.run(ex.ctx, lambda: self._call_noted(ex, task))
            elif task.is_async and task.defaults.timeout is None:  # the plain job: no frame
                result = await task.fn(*ex.args, **ex.kwargs)
            else:  # no middleware: skip a coroutine and a closure per job
                result = await self._call(ex, task)
        except Snooze as s:
            state = JobState.SCHEDULED if s.seconds > 0 else JobState.AVAILABLE
            return self._ack(ex, state, delay=min(s.seconds, MAX_DELAY), attempt_delta=-1)
        except Throttle as t:
            ex.throttle, ex.throttle_scope = min(t.retry_after, MAX_DELAY), t.scope
            state = JobState.SCHEDULED if t.retry_after > 0 else JobState.AVAILABLE
            return self._ack(ex, state, delay=ex.throttle, attempt_delta=-1)
        except Cancel as c:
            return self._ack(ex, JobState.CANCELLED, error_json=self._error(ex, f"cancelled: {c.reason}"))
        except Discard as d:
            return self._ack(ex, JobState.DISCARDED, error_json=self._error(ex, f"discarded: {d.reason}"))
        except asyncio.CancelledError as exc:
            if ex.stop_reason is not None:  # a middleware may still run after the handler
                return self._after_stop(ex, ex.result) if ex.returned else self._stopped(ex)
            if _cancelled_from_outside():
                raise
            return self._raised(ex, task, exc)  # the handler's own CancelledError
        except TaskTimedOut:
            if ex.stop_reason is not None:
                return self._stopped(ex)
            return self._timed_out(ex, task)
        except BaseException as exc:
            # Whatever the handler raises is its attempt's failure: SystemExit,
            # KeyboardInterrupt, GeneratorExit and other BaseExceptions included. A real
            # SIGINT/SIGTERM never arrives here: the worker's signal handlers turn it into
            # a graceful stop, and Python delivers signals to the main thread only.
            return self._raised(ex, task, exc)
        if ex.stop_reason is not None:
            # A sync handler returned after being asked to stop.
            return self._after_stop(ex, result)
        return self._ack(
            ex, JobState.COMPLETED,
            result_json=_payload.encode_result(result, cfg.max_result_bytes, task.codec))

    def crashed(self, ex: Execution, exc: BaseException) -> JobAck | None:
        """The outcome of an attempt that could not be finished (building its ack raised,
        in our code or a hook's): the attempt fails with that error recorded and is
        retried as any failure, so that no job is left ``running`` until its lease runs
        out. A lost lease still writes nothing. Built from plain values when even the
        task's retry policy raises."""
        if ex.stop_reason == "lost":
            return None
        message = f"finishing the attempt failed: {_describe(exc)}"
        log.error("job %d: %s", ex.job.id, message, extra=ex.log_extra())
        task = self._registry.tasks.get(ex.job.task)
        try:
            if task is not None:
                return self._failure(ex, task, message, _traceback(exc), exc)
        except Exception as again:
            log.error("job %d: its failure could not be recorded either: %s", ex.job.id,
                      _describe(again), extra=ex.log_extra())
        job = ex.job
        error = json.dumps({"attempt": job.attempt, "at": datetime.now(UTC).isoformat(),
                            "error": message[:2000], **self._runner})
        if job.attempt >= job.max_attempts:
            return self._ack(ex, JobState.DISCARDED, error_json=error)
        return self._ack(ex, JobState.RETRYABLE, delay=default_backoff(job.attempt),
                         error_json=error)

    def _unreadable(self, ex: Execution, task: Task[Any, Any], exc: ArgumentsError) -> JobAck:
        """Arguments that cannot be decoded: discarded when no worker could (a value
        that does not fit its annotation, a token that does not verify), else a failed
        attempt, retried like any other (a key or type this worker lacks)."""
        log.error("cannot decode the arguments: %s", exc, extra=ex.log_extra())
        if not exc.permanent:
            return self._raised(ex, task, exc)
        return self._ack(ex, JobState.DISCARDED, error_json=self._error(ex, str(exc)))

    def _raised(self, ex: Execution, task: Task[Any, Any], exc: BaseException) -> JobAck:
        # an exception that cannot print itself (or its traceback) still fails the attempt
        return self._failure(ex, task, _describe(exc), _traceback(exc), exc)

    def _stopped(self, ex: Execution, result_json: str | None = None) -> JobAck | None:
        if ex.stop_reason == "lost":
            log.warning("lease lost; dropping this attempt's outcome", extra=ex.log_extra())
            return None
        if ex.stop_reason == "shutdown":
            # Back to the queue at once, and the attempt does not count.
            return self._ack(ex, JobState.AVAILABLE, delay=0.0, attempt_delta=-1)
        msg = "cancelled while running (app.cancel_job)"
        return self._ack(
            ex, JobState.CANCELLED, result_json=result_json, error_json=self._error(ex, msg)
        )

    # -- a handler that returns after a stop (late cancel) --------------------------------

    async def _call_noted(self, ex: Execution, task: Task[Any, Any]) -> Any:
        """``_call`` under middleware: note the handler's return, so a stop that lands
        in a middleware after it cannot undo the success."""
        ex.result = await self._call(ex, task)
        ex.returned = True
        return ex.result

    def _after_stop(self, ex: Execution, result: Any) -> JobAck | None:
        """The handler returned after a cancel or the shutdown was asked for: its result
        stands (a late cancel never overwrites a success), unless it read
        ``current_job().cancelled`` and returned in answer to the stop (then the job is
        cancelled, or given back at shutdown). A lost lease drops the outcome (the fence
        would refuse it anyway)."""
        task = self._registry.tasks.get(ex.job.task)
        encoded = _payload.encode_result(result, self._registry.config.max_result_bytes,
                                         task.codec if task is not None else DEFAULT_CODEC)
        if ex.stop_reason == "lost" or ex.ctx._cancel.seen():
            return self._stopped(ex, encoded)
        log.info("job returned after a %s was requested; its success stands", ex.stop_reason,
                 extra=ex.log_extra())
        return self._ack(ex, JobState.COMPLETED, result_json=encoded)

    # -- a task this worker does not know (rolling deploys) ------------------------------

    def _unknown_task(self, ex: Execution) -> JobAck:
        """No task of this name here. During a rolling deploy a newer worker knows it, so
        the job goes back with a growing delay and its attempt given back; only when no
        worker took it for ``unknown_task_timeout`` since the first worker met it is it
        discarded. The first meeting is recorded in ``errors`` (explain_job reads it)."""
        job, limit = ex.job, self._unknown_task_timeout
        now = time.time()
        first = _unknown_since(job)
        waited = 0.0 if first is None else max(now - first, 0.0)
        if waited >= limit:
            msg = (f"unknown task {job.task!r}: no task of that name is registered in this "
                   f"worker, and no worker that knows it took the job within {limit:g}s "
                   "(unknown_task_timeout)")
            log.error(msg, extra=ex.log_extra())
            return self._ack(ex, JobState.DISCARDED, error_json=self._error(ex, msg))
        delay = min(UNKNOWN_TASK_MAX_DELAY, max(UNKNOWN_TASK_MIN_DELAY, waited / 4))
        delay = min(delay * random.uniform(0.8, 1.2), limit - waited)
        log.warning("unknown task %r: the job waits %.1fs for a worker that knows it",
                    job.task, delay, extra=ex.log_extra())
        error = None
        if first is None:  # the first meeting: recorded once, with the discard deadline
            msg = (f"unknown task {job.task!r}: no task of that name is registered in this "
                   "worker; the job waits for a worker that knows it (a rolling deploy?)")
            entry = json.loads(self._error(ex, msg))
            entry.update(unknown_task=job.task, first_met=_iso(now),
                         discard_at=_iso(now + limit))
            error = _payload.storable(_payload.dumps(entry))
        return self._ack(ex, JobState.SCHEDULED, delay=max(delay, 0.0), attempt_delta=-1,
                         error_json=error)


def _describe(exc: BaseException) -> str:
    """``Type: message``, or the type alone when the exception cannot print itself."""
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:
        return f"{type(exc).__name__}: <str() of the exception failed>"


def _traceback(exc: BaseException) -> str:
    try:
        return "".join(traceback.format_exception(exc))
    except Exception:  # a traceback too deep to format: the error stands without it
        return ""


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()


def _unknown_since(job: Job) -> float | None:
    """When a worker that did not know the job's task first met it, if the job has been
    waiting for one that does since (its latest error entry says so)."""
    last = job.errors[-1] if job.errors else None
    if not isinstance(last, dict) or last.get("unknown_task") != job.task:
        return None
    try:
        return datetime.fromisoformat(str(last["first_met"])).timestamp()
    except (KeyError, ValueError):
        return None
