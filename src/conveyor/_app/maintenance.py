"""Every operator action, written once (retry, cancel, discard, delete, purge, bulk
retry and discard, cancel workflow), and retention or the rescue of expired leases run
now instead of waiting for a worker's service. Each action takes ``source`` (who
asked: "api", "cli", "dashboard", ...) and refuses the same way for every interface
(``refuse``).

Every change goes through the app's storage view (``ObservedStorage``), so discards,
rescues and deletions reach ``on_state_change`` listeners like any other transition
(a deletion as a change with ``deleted=True``). A purge counts first, then deletes in
batches of ``batch_size`` jobs, each batch a short transaction of its own, and never
deletes a running job.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, NoReturn

from .. import _payload
from .._config import WorkerConfig
from .._errors import InvalidStateError, JobNotFoundError
from .._job import DISCARDABLE_FROM, RETRYABLE_FROM, Job, JobState
from .._runtime.pruner import plan_passes, prune_passes
from .._storage import (
    JobBulkParams,
    JobEdit,
    JobFilter,
    JobPruneParams,
    JobPurgeParams,
    JobRescueExpiredParams,
    Storage,
)
from .control import ControlApp
from .edits import edit_params
from .jobs import _check_id

#: What a purge deletes when no state is named: finished jobs only. Waiting jobs are
#: work not done yet, and are deleted only when their state is named.
PURGE_DEFAULT_STATES = (JobState.COMPLETED, JobState.CANCELLED, JobState.DISCARDED)
#: A purge never deletes a running job (its worker would write an outcome to nothing).
PURGEABLE_STATES = tuple(s for s in JobState if s is not JobState.RUNNING)
#: Rows per purge or prune transaction: short locks, whatever the table holds.
DEFAULT_BATCH = 1000
MAX_BATCH = 10_000
#: The longest operator reason kept in a discarded job's error entry.
MAX_REASON = 1000

#: What a bulk action changes when its filter names no state: failed jobs (and for a
#: retry, discarded and cancelled ones). Never completed jobs unless named: re-running
#: them would re-send every email and re-charge every card.
BULK_DEFAULT_STATES: dict[str, tuple[JobState, ...]] = {
    "retry": (JobState.RETRYABLE, JobState.DISCARDED, JobState.CANCELLED),
    "discard": (JobState.RETRYABLE,),
}
#: The states each bulk action may change at all, when named in the filter.
BULK_ALLOWED_STATES: dict[str, tuple[JobState, ...]] = {
    "retry": RETRYABLE_FROM, "discard": DISCARDABLE_FROM,
}
#: "Cancel workflow" repeats at most this many rounds (each settles what the last released).
CANCEL_ROUNDS = 5

#: ``on_count(counts)``: the jobs a purge matches, per state, before anything is
#: deleted; returning False stops the purge there (nothing deleted).
OnCount = Callable[[dict[str, int]], "bool | Awaitable[bool | None] | None"]
#: ``on_progress(deleted_so_far, total)``: after each batch of a purge.
OnProgress = Callable[[int, int], None]


class MaintenanceApp(ControlApp):
    """Operator actions, prune now, rescue now; see ``Conveyor``."""

    # -- one job --------------------------------------------------------------------------

    async def retry_job_async(self, job_id: int, *, args: Sequence[Any] | None = None,
                              kwargs: Mapping[str, Any] | None = None, source: str = "api",
                              user: str | None = None) -> Job:
        """Put a finished or waiting job back in its queue now, with one more attempt.

        With ``args`` and/or ``kwargs`` (edit and retry), the job runs with those instead
        (one left out stays as it was), checked and encoded as an enqueue of its task
        would be (``TypeError``/``ValueError`` before anything changes); the edit is
        recorded with the arguments it replaced, ``source`` and ``user`` (who asked, when
        the interface knows), and shown in the job's timeline (``job_edits``).

        ``source`` names who asked in the state-change event (``"api"``; the CLI says
        ``"cli"``, the dashboard ``"dashboard"``). No such job: ``JobNotFoundError``; a
        job in a state that cannot be retried: ``InvalidStateError`` (its ``job``)."""
        storage = await self.storage_for(source)
        if args is None and kwargs is None:
            job = await storage.job_retry(_check_id(job_id))
        else:
            current = await storage.job_get(_check_id(job_id))
            if current is None:
                raise JobNotFoundError(f"no job with id {job_id}")
            params = edit_params(self.tasks, self.config.max_payload_bytes, current, args,
                                 kwargs, source, user)
            job = await storage.job_retry_edited(params)
        if job is None:
            await refuse(storage, job_id, "retried", RETRYABLE_FROM)
        return self._bound([job])[0]

    async def job_edits_async(self, job_id: int) -> list[JobEdit]:
        """The edits of a job's arguments (``retry_job(..., args=...)``), oldest first:
        when, who asked, and the arguments before and after."""
        return await (await self.storage()).job_edit_list(_check_id(job_id))

    async def cancel_job_async(self, job_id: int, *, source: str = "api") -> Job:
        """Cancel a queued job at once; a running job is stopped by its worker. Errors
        and ``source`` as for ``retry_job_async``."""
        storage = await self.storage_for(source)
        job = await storage.job_cancel(_check_id(job_id))
        if job is None:
            await refuse(storage, job_id, "cancelled", CANCELLABLE_FROM)
        return self._bound([job])[0]

    async def discard_job_async(self, job_id: int, *, reason: str | None = None,
                                source: str = "api") -> Job:
        """End a waiting (scheduled, available or retryable) job as discarded, with an
        error entry that says an operator did it. A running job is refused: cancel it
        (``cancel_job``) and its worker stops it. ``source`` and errors as for
        ``retry_job_async``."""
        _check_id(job_id)
        text = "discarded by an operator"
        if reason is not None:
            if not isinstance(reason, str):
                raise TypeError(f"reason must be a str, got {type(reason).__name__}")
            text += f": {reason[:MAX_REASON]}"
        storage = await self.storage_for(source)
        params = JobBulkParams(JobFilter(ids=(job_id,)), limit=1,
                               error_json=json.dumps({"error": text}))
        if not await storage.job_discard_matching(params):
            await refuse(storage, job_id, "discarded", DISCARDABLE_FROM)
        job = await storage.job_get(job_id)
        if job is None:  # deleted right after the discard
            raise JobNotFoundError(f"no job with id {job_id}")
        return self._bound([job])[0]

    async def delete_job_async(self, job_id: int, *, force: bool = False,
                               source: str = "api") -> Job:
        """Delete a job's row, whatever its state; returns the job as it was. A running
        job is refused unless ``force``: then its worker's outcome matches no row and
        its next heartbeat stops the handler (it may still finish what it was doing)."""
        _check_id(job_id)
        if not isinstance(force, bool):
            raise TypeError("force must be a bool")
        storage = await self.storage_for(source)
        job = await storage.job_delete(job_id, force=force)
        if job is None:
            await refuse(storage, job_id, "deleted", PURGEABLE_STATES)
        return job

    # -- many jobs ------------------------------------------------------------------------

    async def purge_jobs_async(
        self, *, states: Sequence[JobState | str] | JobState | str | None = None,
        queue: str | None = None, task: str | None = None,
        older_than: float | timedelta | None = None, dry_run: bool = False,
        batch_size: int = DEFAULT_BATCH, on_count: OnCount | None = None,
        on_progress: OnProgress | None = None, source: str = "api",
    ) -> int:
        """Delete every job matching the filter, ``batch_size`` per transaction; how many
        were deleted (with ``dry_run``: how many would be, nothing deleted).

        ``states`` defaults to the finished ones (completed, cancelled, discarded);
        waiting states are purged only when named, and running jobs never. A job's age
        (``older_than``, seconds or a timedelta) is that of its finish, or of its
        creation if it never finished. The purge counts first, then deletes matching
        jobs up to the highest id it counted and never more than it counted: jobs
        enqueued meanwhile are spared, and the count ``on_count`` was shown is the
        most it deletes.

        Example: ``app.purge_jobs(states=["discarded"], older_than=timedelta(days=30))``
        """
        params = JobPurgeParams(
            _purge_states(states), _name(queue, _payload.check_queue_name),
            _name(task, _payload.check_task_name), _seconds(older_than, "older_than"),
            limit=_batch(batch_size))
        storage = await self.storage_for(source)
        count = await storage.job_purge_count(params)
        counts = {s.value: n for s, n in sorted(count.counts.items()) if n}
        if on_count is not None:
            answer = on_count(counts)
            if inspect.isawaitable(answer):
                answer = await answer
            if answer is False:
                return 0
        if dry_run or count.max_id is None:
            return count.total
        deleted = 0
        after: int | None = 0
        while after is not None and deleted < count.total:
            # never past the highest id counted, never more jobs than counted
            batch = await storage.job_purge_batch(dataclasses.replace(
                params, after_id=after, max_id=count.max_id,
                limit=min(params.limit, count.total - deleted)))
            deleted += len(batch.deleted)
            after = batch.next_after
            if on_progress is not None:
                on_progress(deleted, count.total)
        return deleted

    async def retry_matching_async(self, flt: JobFilter, *, limit: int,
                                   source: str = "api") -> int:
        """Retry every job matching ``flt``, at most ``limit``; how many were retried.
        Only the states of ``bulk_states("retry", flt.states)``: without a state in
        the filter, failed, discarded and cancelled jobs, never completed ones."""
        narrowed = bulk_filter("retry", flt)
        if narrowed is None:
            return 0
        storage = await self.storage_for(source)
        return len(await storage.job_retry_matching(JobBulkParams(narrowed, _limit(limit))))

    async def discard_matching_async(self, flt: JobFilter, *, limit: int,
                                     source: str = "api") -> int:
        """Discard every waiting job matching ``flt``, at most ``limit``: without a
        state in the filter, only retryable (failed) ones; how many were discarded."""
        narrowed = bulk_filter("discard", flt)
        if narrowed is None:
            return 0
        storage = await self.storage_for(source)
        return len(await storage.job_discard_matching(JobBulkParams(narrowed, _limit(limit))))

    async def cancel_workflow_async(self, workflow_id: str, *, source: str = "api") -> int:
        """Cancel every job of the workflow that is not final yet; how many were changed
        (an unknown workflow: 0, nothing changed).

        The jobs that could run (waiting, running) go first, so the database's cascade
        settles most ``pending`` dependents by itself. Cancelling a dependency releases
        a dependent whose edge says "run", so more rounds follow until one finds nothing
        left to cancel."""
        changed = 0
        for round_ in range(CANCEL_ROUNDS):
            info = await self.get_workflow_async(workflow_id)
            targets = [j for j in (info.jobs if info is not None else [])
                       if not j.state.is_final and not j.cancel_requested
                       and (round_ > 0 or j.state is not JobState.PENDING)]
            done = 0
            for job in targets:
                # deleted or finished meanwhile: nothing to cancel
                with contextlib.suppress(JobNotFoundError, InvalidStateError):
                    await self.cancel_job_async(job.id, source=source)
                    done += 1
            changed += done
            if round_ > 0 and not done:
                break
        return changed

    # -- the services, now ------------------------------------------------------------------

    async def prune_now_async(
        self, *, completed_retention: float | timedelta | None = None,
        discarded_retention: float | timedelta | None = None, dry_run: bool = False,
        batch_size: int = DEFAULT_BATCH,
    ) -> int:
        """Run retention now, as the pruner service does: delete completed and cancelled
        jobs finished more than ``completed_retention`` ago, and discarded jobs more than
        ``discarded_retention`` ago (defaults: ``WorkerConfig``'s), in batches; with
        them, nodes and rate-limit rows long silent. A queue with a retention of its own
        (``set_queue_retention``) keeps it, as with the pruner, unless a retention is
        given here. How many jobs were deleted (with ``dry_run``: how many would be,
        nothing deleted). No state-change events, as for the pruner."""
        defaults = WorkerConfig()
        params = JobPruneParams(
            _age(completed_retention, "completed_retention", defaults.completed_retention),
            _age(discarded_retention, "discarded_retention", defaults.discarded_retention),
            _batch(batch_size))
        storage = await self.storage()
        explicit = completed_retention is not None or discarded_retention is not None
        passes = [params] if explicit else plan_passes(params, await storage.queue_list())
        if dry_run:
            return sum([await storage.job_prune_count(one) for one in passes])
        return await prune_passes(storage, passes)

    async def rescue_now_async(self, *, dry_run: bool = False, limit: int = 10_000) -> list[Job]:
        """Rescue the jobs whose lease expired (or whose node stopped heartbeating past
        its ttl) now, as the rescuer service does: each goes back to its queue, or ends
        discarded when it used its last attempt, or cancelled when a cancel was asked.
        Returns the jobs rescued, as they are now (with ``dry_run``: the jobs that would
        be, still running; nothing changed). At most ``limit`` jobs."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError("limit must be an int >= 1")
        storage = await self.storage()
        if dry_run:
            return await storage.job_rescue_candidates(JobRescueExpiredParams(limit=limit))
        ids: list[int] = []
        while len(ids) < limit:
            step = min(DEFAULT_BATCH, limit - len(ids))
            rescued = await storage.job_rescue_expired(JobRescueExpiredParams(limit=step))
            ids += rescued
            if len(rescued) < step:
                break
        jobs = [await storage.job_get(i) for i in sorted(ids)]
        return [j for j in jobs if j is not None]


def _purge_states(states: Sequence[JobState | str] | JobState | str | None
                  ) -> tuple[JobState, ...]:
    if states is None:
        return PURGE_DEFAULT_STATES
    named = [states] if isinstance(states, str) else list(states)
    if not named:
        raise ValueError("states is empty: name at least one, or pass None for the "
                         "finished states")
    found: list[JobState] = []
    for state in named:
        if not isinstance(state, str):
            raise TypeError(f"a state is a JobState or its name, got {state!r}")
        try:
            value = JobState(state)
        except ValueError:
            known = ", ".join(s.value for s in PURGEABLE_STATES)
            raise ValueError(f"unknown state {state!r}; expected one of {known}") from None
        if value is JobState.RUNNING:
            raise ValueError("running jobs are never purged: cancel them first")
        if value not in found:
            found.append(value)
    return tuple(found)


#: A cancel applies to every job not finished yet (a running one is stopped by its worker).
CANCELLABLE_FROM = tuple(s for s in JobState if not s.is_final)


async def refuse(storage: Storage, job_id: int, verb: str,
                 allowed: Sequence[JobState]) -> NoReturn:
    """Why an action changed nothing, the same for every action and every interface:
    no such job (``JobNotFoundError``), or its state (``InvalidStateError`` carrying
    the job as it is now)."""
    job = await storage.job_get(job_id)
    if job is None:
        raise JobNotFoundError(f"no job with id {job_id}")
    if job.state is JobState.RUNNING and JobState.RUNNING not in allowed:
        hint = "cancel it first (its worker stops it)"
        if verb == "deleted":
            hint += ", or delete it with force"
        raise InvalidStateError(f"job {job_id} is running and cannot be {verb}: {hint}", job)
    if job.state not in allowed:
        raise InvalidStateError(f"job {job_id} is {job.state.value} and cannot be {verb}", job)
    raise InvalidStateError(f"job {job_id} changed while being {verb}; try again", job)


def bulk_states(action: str, named: tuple[JobState, ...]) -> tuple[JobState, ...]:
    """The states a bulk ``action`` ("retry" or "discard") changes for a filter naming
    ``named`` (empty: none named): the defaults, or the named ones it may change (maybe
    none at all)."""
    if not named:
        return BULK_DEFAULT_STATES[action]
    return tuple(s for s in named if s in BULK_ALLOWED_STATES[action])


def bulk_filter(action: str, flt: JobFilter) -> JobFilter | None:
    """``flt`` narrowed to the states ``action`` changes; None when it changes nothing."""
    states = bulk_states(action, flt.states)
    return dataclasses.replace(flt, states=states) if states else None


def _limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be an int >= 1, got {limit!r}")
    return limit


def _name(value: str | None, check: Callable[[str], str]) -> str | None:
    return check(value) if value is not None else None


def _age(value: float | timedelta | None, what: str, default: float) -> float:
    seconds = _seconds(value, what)
    return default if seconds is None else seconds


def _seconds(value: float | timedelta | None, what: str) -> float | None:
    """A non-negative duration in seconds (a number or a timedelta), or None."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} is seconds (a number) or a timedelta, got {value!r}")
    if not value >= 0 or value == float("inf"):  # also NaN
        raise ValueError(f"{what} must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


def _batch(size: int) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_BATCH:
        raise ValueError(f"batch_size must be an int from 1 to {MAX_BATCH}")
    return size


__all__ = ["BULK_ALLOWED_STATES", "BULK_DEFAULT_STATES", "CANCEL_ROUNDS", "PURGEABLE_STATES",
           "PURGE_DEFAULT_STATES", "MaintenanceApp", "bulk_filter", "bulk_states"]
