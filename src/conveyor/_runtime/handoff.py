"""The jobs of a worker process killed at a hard time limit, settled by its replacement.

The supervisor (``cli/_supervisor.py``), having heard the child's leases and deadlines
through its pipe (``hardlimit``), kills a child too wedged to recycle itself (a sync
handler in C code holding the GIL) and gives its replacement a ``Handoff`` in a file
(``HANDOFF_ENV`` names its fd): the jobs past their soft timeout fail with
``TaskTimedOut`` exactly as a soft timeout records it (the task's retry policy
applies), the others go back without using an attempt. ``settle`` builds those
outcomes, fenced on each lease token the killed child held, and the replacement writes
them through its acker (events and metrics as for any attempt) before it claims."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import time
from collections.abc import Iterator

from .._config import HANDOFF_ENV
from .._context import JobContext
from .._job import JobState
from .._storage import JobAck, Storage
from .executor import Execution, Executor

log = logging.getLogger("conveyor.worker")



@dataclasses.dataclass(frozen=True, slots=True)
class Handoff:
    """What a child killed at a hard time limit left running: ``(job, lease token,
    claimed at)`` of the jobs past their soft timeout and of the others (epoch s). The
    supervisor writes it as JSON (``Supervisor._handoff``), without importing this."""

    pid: int
    node: str | None
    killed_at: float
    timed_out: list[tuple[int, int, float]]
    given_back: list[tuple[int, int, float]]

    @classmethod
    def loads(cls, data: bytes) -> Handoff:
        d = json.loads(data)
        return cls(int(d["pid"]), d.get("node"), float(d["killed_at"]),
                   [(int(i), int(t), float(s)) for i, t, s in d["timed_out"]],
                   [(int(i), int(t), float(s)) for i, t, s in d["given_back"]])


def read_handoff() -> Handoff | None:
    """The handoff the supervisor gave this process, read once (the variable is
    removed, so a worker started later in this process does not settle it again)."""
    value = os.environ.pop(HANDOFF_ENV, "")
    if not value.isdigit():
        return None
    fd = int(value)
    try:
        data = b""
        while chunk := os.pread(fd, 1 << 20, len(data)):
            data += chunk
        return Handoff.loads(data)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.error("could not read the jobs of the child killed at a hard time limit (%s); "
                  "they return when their lease expires", exc)
        return None
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


async def settle(h: Handoff, storage: Storage, x: Executor,
                 executions: dict[int, Execution]) -> list[JobAck]:
    """The outcomes of the killed child's jobs still leased to it: each is registered
    in ``executions`` (events and metrics see it as any attempt) and returned for the
    acker. A job no longer running under its token (finished, rescued, re-leased) is
    left alone; the writes are fenced on the token anyway."""
    settled: list[tuple[Execution, JobAck]] = []
    now = time.monotonic()
    for group, timed_out in ((h.timed_out, True), (h.given_back, False)):
        for job_id, token, claimed in group:
            job = await storage.job_get(job_id)
            if job is None or job.state is not JobState.RUNNING or job.lease_token != token:
                log.info("job %d of the killed process %d: already settled", job_id, h.pid)
                continue
            ex = Execution(job, JobContext(job))
            ex.started = now - max(h.killed_at - claimed, 0.0)
            ex.run_time = now - ex.started
            ack = _timed_out(h, x, ex) if timed_out else None
            if ack is None:  # as the at-once recycle gives a running job back
                ex.stop_reason = "shutdown"
                ack = x._stopped(ex)
                log.info("job %d of the killed process %d: given back, its attempt not "
                         "used", job_id, h.pid, extra=ex.log_extra())
            if ack is not None:
                settled.append((ex, ack))
    for ex, _ack in settled:  # registered only now: a read that raised leaves none behind
        executions[ex.job.id] = ex
    return [ack for _, ack in settled]


def _timed_out(h: Handoff, x: Executor, ex: Execution) -> JobAck | None:
    """The attempt's failure with ``TaskTimedOut``, as the soft timeout records it (its
    error entry names the killed process as its runner), or None for a task unknown here."""
    task = x._registry.tasks.get(ex.job.task)
    if task is None:
        return None
    log.warning("job %d was killed with worker process %d at its hard time limit: "
                "attempt %d fails with TaskTimedOut", ex.job.id, h.pid, ex.job.attempt,
                extra=ex.log_extra())
    with _runner(x, h):
        return x._timed_out(ex, task)


@contextlib.contextmanager
def _runner(x: Executor, h: Handoff) -> Iterator[None]:
    """Error entries written meanwhile name the killed process (no await inside)."""
    saved = x._runner
    x._runner = {**saved, "node": h.node, "pid": h.pid}
    try:
        yield
    finally:
        x._runner = saved
