"""A producer per queue: claims as many jobs as there are free slots, then waits."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

from .._job import Job
from .._limits import RateLimit
from .._storage import JobFetchAvailableParams, Storage
from .eager import spawn

log = logging.getLogger("conveyor.producer")

#: Seconds between a plain producer's looks for fair-keyed work in its queue (one probe
#: of the fair index): a plain queue's claims stay today's statement.
FAIR_PROBE_INTERVAL = 1.0

#: Admits claimed jobs past rate and concurrency limits; returns those that may run now.
Admit = Callable[[list[Job], "Producer"], Awaitable[list[Job]]]


class Producer:
    """Demand-driven: demand = limit - running. Wakes on a notification, on a freed
    slot, or after the poll interval, whichever comes first. Live queue settings
    (pause, limit, rate limit) arrive through ``apply``."""

    def __init__(
        self,
        storage: Storage,
        queue: str,
        limit: int,
        owner: str,
        lease_ttl: float,
        fetch_limit: int,
        start: Callable[[Job, Producer], None],
        admit: Admit | None = None,
        labels: Mapping[str, str] | None = None,
        tasks: Sequence[str] | None = None,
        fair_probe_interval: float = FAIR_PROBE_INTERVAL,
        claim_ahead: bool = False,
    ) -> None:
        self.queue = queue
        #: The limit this node was started with (-q / -c); settings may override it.
        self.configured_limit = limit
        self.limit = limit
        self.paused = False
        #: A queue-wide rate limit set at runtime (``set_queue_rate_limit``).
        self.rate_limit: RateLimit | None = None
        self.running = 0
        #: True after a fetch found nothing and nothing runs here (burst mode uses it).
        self.idle = False
        #: A claim is on its way (its outcome decides ``idle``).
        self.looking = False
        #: True when the last fetch got all it asked for: there may be more.
        self.saturated = False
        self._storage = storage
        self._owner = owner
        self._lease_ttl = lease_ttl
        self._fetch_limit = fetch_limit
        self._start = start
        self._admit = admit
        #: Outcomes of this worker still waiting for their write (set by the worker).
        #: Claims pause above max(limit, fetch_limit) of them: a slow database must not
        #: let claimed jobs pile up while their acks queue (leases would run out).
        self.unacked: Callable[[], int] = lambda: 0
        #: Jobs a gathering chunk can still take (``conveyor._runtime.chunks``): added
        #: to the claim's size, as a chunk counts as one running job. 0 without chunks.
        self.room = 0
        self._wake = asyncio.Event()
        self._poll = storage.capabilities.poll_interval
        self._hold_until = 0.0
        #: Which jobs this worker may claim: with labels or a task filter, the routed
        #: claim; without, the plain one (jobs that require no labels).
        self._labels = dict(labels) if labels else None
        self._tasks = tuple(tasks) if tasks is not None else None
        #: Claim round-robin across fair keys (the queue has fair-keyed work), and when
        #: a plain producer last looked for some (loop time; -inf: look at once).
        self.fair = False
        self._fair_probed = float("-inf")
        self._fair_probe_interval = fair_probe_interval
        #: Claim the next jobs while those just claimed start, when the limit leaves
        #: room (the Worker's producers): the database works on the claim while the
        #: loop runs the jobs, instead of each waiting for the other. The claim ahead,
        #: and how many it asked for, until ``run_once`` takes its jobs.
        self._claim_ahead = claim_ahead
        self._ahead: asyncio.Task[tuple[list[Job], int]] | None = None
        self._claims = 0  # claims on their way
        self._stopping: asyncio.Event | None = None  # run()'s: no claim ahead once set

    def wake(self) -> None:
        self._wake.set()

    def finished(self) -> None:
        self.running -= 1
        self._wake.set()

    def apply(self, *, paused: bool, limit: int, rate_limit: RateLimit | None) -> None:
        """Take new live settings; a resumed or widened queue fetches at once."""
        if paused != self.paused or limit != self.limit:
            log.info("queue %r: paused=%s limit=%d", self.queue, paused, limit)
        if (self.paused and not paused) or limit > self.limit:
            self._wake.set()
        self.paused, self.limit, self.rate_limit = paused, limit, rate_limit

    def hold(self, seconds: float) -> None:
        """Back off fetching (the upstream throttled a job of this queue)."""
        loop = asyncio.get_running_loop()
        self._hold_until = max(self._hold_until, loop.time() + seconds)

    def _demand(self) -> int:
        return min(self.limit - self.running + self.room, self._fetch_limit,
                   max(self.limit, self._fetch_limit) - self.unacked())

    async def run_once(self) -> int:
        """Claim up to the free capacity and start each job; returns how many. A claim
        made ahead (``claim_ahead``) is taken instead of a new one."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            jobs, demand = await ahead
        else:
            demand = self._demand()
            if self.paused or demand <= 0:
                self.idle, self.saturated = self.running == 0, False
                return 0
            jobs, demand = await self._claim(demand)
        if self.fair:
            if len(jobs) < demand and not any(j.fair_key for j in jobs):
                self.fair = False  # the fair-keyed work is done: today's claim again
                self._fair_probed = asyncio.get_running_loop().time()
        elif any(j.fair_key is not None for j in jobs):
            self.fair = True  # a plain claim met fair-keyed work: take turns from now on
        self.idle = not jobs and self.running == 0
        self.saturated = len(jobs) == demand
        admitted = await self._admit(jobs, self) if self._admit is not None and jobs else jobs
        self.running += len(admitted)
        if self._claim_ahead and self.saturated and not self.paused and not self._stopped():
            more = self._demand()
            if more > 0:  # room left beside the jobs about to start: claim it now
                self._ahead = spawn(self._claim(more))
        for job in admitted:
            self._start(job, self)
        return len(admitted)

    def _stopped(self) -> bool:
        return self._stopping is not None and self._stopping.is_set()

    async def _claim(self, demand: int) -> tuple[list[Job], int]:
        """One claim of up to ``demand`` jobs, and ``demand``."""
        self._claims += 1
        self.looking = True  # burst mode waits for a look under way (Worker._watch_burst)
        try:
            await self._probe_fair()
            jobs = await self._storage.job_fetch_available(
                JobFetchAvailableParams(self.queue, demand, self._owner, self._lease_ttl,
                                        self._labels, self._tasks, self.fair)
            )
        finally:
            self._claims -= 1
            self.looking = self._claims > 0
        return jobs, demand

    async def _probe_fair(self) -> None:
        """A plain producer looks for fair-keyed work now and then (FAIR_PROBE_INTERVAL)."""
        if self.fair:
            return
        now = asyncio.get_running_loop().time()
        if now - self._fair_probed >= self._fair_probe_interval:
            self._fair_probed = now
            self.fair = await self._storage.job_fair_pending(self.queue)

    async def run(self, stopping: asyncio.Event) -> None:
        self._stopping = stopping
        try:
            await self._run(stopping)
        finally:  # cancelled: a claim ahead goes with it, as a claim awaited here would
            ahead, self._ahead = self._ahead, None
            if ahead is not None and not ahead.done():
                ahead.cancel()
                with contextlib.suppress(BaseException):
                    await ahead

    async def _run(self, stopping: asyncio.Event) -> None:
        failures = 0
        loop = asyncio.get_running_loop()
        while not stopping.is_set():
            self._wake.clear()
            held = self._hold_until - loop.time()
            claimed = 0
            if held <= 0:
                try:
                    claimed = await self.run_once()
                    failures = 0
                except Exception as exc:
                    failures += 1
                    log.warning("fetch from queue %r failed: %s", self.queue, exc)
                if self._ahead is not None or (
                        claimed and self.saturated and (self.running < self.limit or self.room)):
                    continue  # claimed ahead, or maybe more waiting: ask again at once
            await self._sleep(held if held > 0 else self._poll * min(2**failures, 16))
        if self._ahead is not None:  # claimed before the stop: its jobs start, as claimed
            with contextlib.suppress(Exception):
                await self.run_once()

    async def _sleep(self, timeout: float) -> None:
        """Until woken or ``timeout`` passes. ``Worker.stop`` wakes every producer after
        setting ``stopping``, so the wake Event alone is waited on: no Task per wait (and
        none of their loop turns between a notification and its claim)."""
        if self._wake.is_set():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._wake.wait()
