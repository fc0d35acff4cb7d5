"""Why is my job not running? Every reason a job waits, in plain words."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ._errors import JobNotFoundError
from ._job import FINAL_STATES, Job, JobState
from ._limits import RateLimit
from ._redact import erase, secret_values
from ._routing import describe, satisfies
from ._storage import (
    FairKey,
    NodeRow,
    QueueRow,
    Storage,
    keys_ahead,
)
from ._task import Task


@dataclasses.dataclass(frozen=True, slots=True)
class Explanation:
    """What holds a job back (``reasons``), plus facts worth knowing (``notes``).

    Example: ``print(app.explain_job(42))``
    """

    job: Job
    reasons: list[str]
    notes: list[str]

    @property
    def summary(self) -> str:
        return self.reasons[0] if self.reasons else self.notes[0]

    def __str__(self) -> str:
        lines = [f"job {self.job.id} ({self.job.task}, queue {self.job.queue}): {self.job.state}"]
        lines += [f"  - {r}" for r in self.reasons] + [f"  · {n}" for n in self.notes]
        return "\n".join(lines)


def _in(now: datetime, at: datetime | None) -> str:
    if at is None:
        return "unknown"
    seconds = (at - now).total_seconds()
    return f"{at.isoformat(timespec='seconds')} (in {seconds:.1f}s)" if seconds > 0 else (
        f"{at.isoformat(timespec='seconds')} ({-seconds:.1f}s ago)")


def _last_error(job: Job) -> str:
    """The last error, without the secrets of the job its code may have echoed."""
    if not job.errors:
        return "no error recorded"
    secrets = secret_values([job.args, job.kwargs, job.meta, job.result])
    return str(erase(str(job.errors[-1].get("error", "")), secrets))


def _settled(job: Job, now: datetime) -> list[str] | None:
    """Reasons for a job that is not waiting to start at all (final or running)."""
    if job.state.is_final:
        why = {JobState.COMPLETED: "it completed",
               JobState.CANCELLED: "it expired (not started before its expires_at "
                                   f"{_in(now, job.expires_at)}) and was cancelled, never run"
               if expired(job) else "it was cancelled",
               JobState.DISCARDED: f"it was discarded: {_last_error(job)}"}[job.state]
        return [f"{why} at {_in(now, job.finished_at)}; it runs again only if retried "
                f"(conveyor jobs retry {job.id})"]
    if job.state == JobState.RUNNING:
        out = [f"it is running: attempt {job.attempt} on node {job.lease_owner}, "
               f"lease until {_in(now, job.lease_expires_at)}"]
        if job.cancel_requested:
            out.append("a cancel was requested: its worker stops it within one heartbeat")
        return out
    return None


def expired(job: Job) -> bool:
    """Whether a cancelled job ended because it expired (its last error says so)."""
    last = job.errors[-1] if job.state is JobState.CANCELLED and job.errors else None
    return isinstance(last, dict) and last.get("reason") == "expired"


def _expiry(job: Job, now: datetime) -> tuple[list[str], list[str]]:
    """(reasons, notes) of a waiting job with an expiry: past it, it will never run."""
    if job.expires_at is None:
        return [], []
    if job.expires_at <= now:
        return [f"it expired at {_in(now, job.expires_at)} without starting: it never runs "
                "and ends cancelled (reason \"expired\") at the expirer's next pass"], []
    return [], [f"it expires at {_in(now, job.expires_at)}: if it has not started by then "
                "it never runs (cancelled, reason \"expired\")"]


async def _node_notes(storage: Storage, node_id: str | None) -> list[str]:
    """Who holds a running job: the node's host, the app version it runs, its labels."""
    node = next((n for n in await storage.node_list() if n.id == node_id), None)
    if node is None:
        return [f"node {node_id} is not registered (gone): the job is rescued when its "
                "lease runs out"]
    labels = ", ".join(f"{k}={v}" for k, v in sorted(node.labels.items())) or "none"
    return [f"node {node.id} runs it: host {node.hostname} pid {node.pid}, app version "
            f"{node.version or 'unknown'}, labels {labels}"
            + ("" if node.alive else "; the node has gone silent")]


async def _limits(task: Task[Any, Any] | None, job: Job, queue: QueueRow | None,
                  storage: Storage, now: datetime) -> list[str]:
    out: list[str] = []
    limits: list[tuple[str, RateLimit]] = []
    if task is not None and task.defaults.rate_limit is not None:
        limit = task.defaults.rate_limit
        limits.append((limit.key_for(f"task:{job.task}", *task.key_arguments(job.args, job.kwargs)), limit))
    if queue is not None and queue.rate_limit:
        limits.append((f"queue:{job.queue}", RateLimit(queue.rate_limit)))
    for key, limit in limits:
        tat = await storage.rate_limit_get(key)
        allowed_at = (tat or 0) - (limit.burst - 1) * limit.interval
        if allowed_at > now.timestamp():
            refill = datetime.fromtimestamp(allowed_at, now.tzinfo)
            out.append(f"rate limit {limit.rate} for key {key!r} is used up; the next start "
                       f"is allowed at {_in(now, refill)}")
    if task is not None and task.defaults.concurrency and job.concurrency_key:
        holders = await storage.job_concurrency_holders(job.concurrency_key)
        if len(holders) >= task.defaults.concurrency:
            out.append(f"concurrency limit {task.defaults.concurrency} for key "
                       f"{job.concurrency_key!r} is reached; held by job(s) "
                       + ", ".join(f"#{i}" for i in holders))
    return out


def _chunk_note(task: Task[Any, Any] | None, job: Job) -> list[str]:
    """A chunk task's job runs with others in one handler call: while running, it may
    be gathering (up to ``wait``) or waiting for the chunk's handler."""
    chunk = task.defaults.chunk if task is not None else None
    if chunk is None:
        return []
    how = (f"task {job.task!r} runs in chunks of up to {chunk.size} jobs, gathered for up "
           f"to {chunk.wait:g}s after the first is claimed")
    if job.state == JobState.RUNNING:
        return [f"{how}: this job is gathering into a chunk or running in one, and ends "
                "with that chunk's handler call"]
    return [f"{how}: it will run in one handler call with others of its task"]


def _and(ids: list[int]) -> str:
    return ", ".join(map(str, ids[:-1])) + f" and {ids[-1]}" if len(ids) > 1 else str(ids[0])


async def _waiting_on(storage: Storage, job: Job) -> str:
    """A pending job waits on its dependencies not final yet, or on its batch."""
    deps = await storage.job_dependencies(job.id)
    waiting = [d.id for d in deps if d.state is not None and JobState(d.state) not in FINAL_STATES]
    if waiting:
        noun = "job" if len(waiting) == 1 else "jobs"
        return f"it is waiting on {noun} {_and(waiting)} (its dependencies) to finish"
    batch = await storage.batch_waited_on(job.id)
    if batch is not None:
        return f"it is a callback waiting for batch {batch} to finish"
    return "it is pending: waiting to be released by its dependencies"


def _unknown_task(job: Job, now: datetime) -> list[str]:
    """A job a worker met without knowing its task waits for one that does (rolling
    deploys); its latest error entry says since when, and when it will be discarded."""
    last = job.errors[-1] if job.errors else {}
    if last.get("unknown_task") != job.task:
        return []
    try:
        first = datetime.fromisoformat(str(last["first_met"]))
        deadline = datetime.fromisoformat(str(last["discard_at"]))
    except (KeyError, ValueError):
        return []
    return [f"a worker that does not know task {job.task!r} met it at "
            f"{_in(now, first)} ({last.get('host', '?')}, pid {last.get('pid', '?')}); it "
            f"waits for a worker that knows the task and is discarded at {_in(now, deadline)} "
            "if none takes it (unknown_task_timeout)"]


async def _cooldown(job: Job, storage: Storage, now: datetime) -> list[str]:
    """A queue cooled down by Throttle(scope="queue") is claimed by no worker."""
    for row in await storage.queue_cooldown_list():
        if row.queue == job.queue and row.active:
            return [f"queue {job.queue!r} is cooling down after a Throttle(scope=\"queue\") "
                    f"until {_in(now, row.cool_until)} (cool-down {row.seconds:g}s, "
                    f"streak {row.streak}); no worker claims from it until then"]
    return []


def _routing(job: Job, serving: list[NodeRow]) -> list[str]:
    """Whether a live worker of the job's queue knows its task, serves it (``--tasks``)
    and has the labels it requires."""
    if not serving:
        return [f"no live worker serves queue {job.queue!r}"]
    knowing = [n for n in serving if job.task in n.tasks]
    if not knowing:
        return [f"no live worker knows task {job.task!r} (none of the {len(serving)} "
                f"serving queue {job.queue!r} has it registered)"]
    serving = [n for n in knowing if n.serves is None or job.task in n.serves]
    if not serving:
        return [f"no live worker serves task {job.task!r}: the {len(knowing)} of queue "
                f"{job.queue!r} that know it were started with --tasks leaving it out"]
    if job.requires and not any(satisfies(n.labels, job.requires) for n in serving):
        return [f"needs {describe(job.requires)}; no live worker has it (none of the "
                f"{len(serving)} serving queue {job.queue!r} and task {job.task!r} "
                "was started with these --label)"]
    return []


async def _fair_turn(job: Job, storage: Storage) -> tuple[list[str], list[str]]:
    """An available fair-keyed job waits for its key's turn: (reasons, notes)."""
    if job.fair_key is None or job.state != JobState.AVAILABLE:
        return [], [f"fair key {job.fair_key!r}: its jobs take turns with other keys' in "
                    f"queue {job.queue!r}"] if job.fair_key is not None else []
    rows = [r for r in await storage.fair_key_list(job.queue) if r.waiting]
    ahead = keys_ahead([FairKey(r.key, 0, r.weight, r.vtime) for r in rows], job.fair_key)
    mine = next((r for r in rows if r.key == job.fair_key), None)
    waiting = f"{mine.waiting} job(s) of its key waiting" if mine is not None else "its key"
    if ahead:
        return [f"it is waiting its turn behind {ahead} other key{'s' * (ahead != 1)} in queue "
                f"{job.queue!r} "
                f"(fair key {job.fair_key!r}: keys take turns; {waiting})"], []
    return [], [f"fair key {job.fair_key!r} is next in turn in queue {job.queue!r} ({waiting})"]


async def explain(tasks: Mapping[str, Task[Any, Any]], storage: Storage, job_id: int) -> Explanation:
    """Read what concerns the job (its row, its queue, the live nodes, its limits)."""
    job = await storage.job_get(job_id)
    if job is None:
        raise JobNotFoundError(f"no job with id {job_id}")
    now = await storage.clock_now()
    notes = [f"it holds unique key {job.unique_key!r}: enqueues with the same key return it"
             ] if job.unique_key else []
    notes += _chunk_note(tasks.get(job.task), job)
    if job.requires:
        notes.append(f"it runs only on a worker labelled {describe(job.requires)}")
    settled = _settled(job, now)
    if settled is not None:
        if job.state == JobState.RUNNING:
            notes += await _node_notes(storage, job.lease_owner)
        return Explanation(job, settled, notes)
    reasons, expiry_notes = _expiry(job, now)
    notes += expiry_notes
    if job.state == JobState.PENDING:
        reasons.append(await _waiting_on(storage, job))
    elif job.state == JobState.SCHEDULED:
        reasons.append(f"it is scheduled for {_in(now, job.scheduled_at)}")
    elif job.state == JobState.RETRYABLE:
        reasons.append(f"it is waiting for its backoff after attempt {job.attempt} failed "
                       f"({_last_error(job)}); next attempt at {_in(now, job.scheduled_at)}")
    queue = next((q for q in await storage.queue_list() if q.name == job.queue), None)
    if queue is not None and queue.paused:
        reasons.append(f"queue {job.queue!r} is paused (conveyor queues resume {job.queue})")
    reasons += _routing(job, [n for n in await storage.node_list()
                              if n.alive and job.queue in n.queues])
    reasons += _unknown_task(job, now)
    reasons += await _cooldown(job, storage, now)
    reasons += await _limits(tasks.get(job.task), job, queue, storage, now)
    turn, fair_notes = await _fair_turn(job, storage)
    reasons += turn
    notes += fair_notes
    if job.state == JobState.AVAILABLE and not reasons:
        ahead = await storage.job_count_ahead(job.id)
        notes.insert(0, "nothing holds it back: it is next" if ahead == 0 else
                     f"nothing holds it back: {ahead} job(s) are ahead of it in queue {job.queue!r}")
    return Explanation(job, reasons, notes if notes or reasons else ["nothing holds it back"])
