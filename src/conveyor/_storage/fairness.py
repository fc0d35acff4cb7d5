"""The fair claim's plan, written once for every backend (sans-IO, like ``unique.py``).

Each key of a queue with fair-keyed work has a virtual time: the service it had, one
unit per claimed job divided by its weight (``conveyor_fair_keys``). A claim hands
its slots out in order of each key's next finishing time (virtual time + n/weight),
so keys with work take turns, a key of weight 2 twice as often. A key that comes back
after a pause starts no earlier than one unit before the busiest key (``start_times``):
it does not get to catch up on the service it did not ask for.

Priority first: a round hands out slots among the keys whose next job has the highest
priority; after a key ran short, the keys are read again for the next round, without
the keys that ran short (what they have left, this claimer may not take). The
key ``""`` (``PLAIN``) stands for the queue's jobs without a fair key.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterable, Mapping
from typing import Any

#: The key of a fair queue's jobs that have none (a user's key is never empty).
PLAIN = ""
#: A fair queue's jobs without a key are looked for among this many of its first jobs
#: in plain order (there is no index of them alone: plain jobs maintain none).
PLAIN_LOOKAHEAD = 1000
#: Seconds between looks for a fair queue's jobs without a key, while it has none (the
#: look reads ``PLAIN_LOOKAHEAD`` rows; a queue that has some looks at every claim).
PLAIN_PROBE_INTERVAL = 1.0
#: Rounds of one claim (a round ends when a key runs out of jobs at its priority).
MAX_ROUNDS = 4


@dataclasses.dataclass(slots=True)
class FairKey:
    """A key with available work: its next job's priority, weight and virtual time."""

    key: str
    priority: int
    weight: float
    vtime: float


class PlainProbe:
    """When a fair claim of a queue looks for its jobs without a key (``lookahead``):
    at every claim while it has some, else once a ``PLAIN_PROBE_INTERVAL``."""

    def __init__(self) -> None:
        self._due: dict[str, float] = {}

    def lookahead(self, queue: str, now: float) -> int:
        return PLAIN_LOOKAHEAD if now >= self._due.get(queue, 0.0) else 0

    def found(self, queue: str, keys: Iterable[FairKey], now: float, looked: bool) -> None:
        if any(k.key == PLAIN for k in keys):
            self._due[queue] = 0.0
        elif looked:
            self._due[queue] = now + PLAIN_PROBE_INTERVAL


def key_rows(rows: Iterable[Any]) -> list[FairKey]:
    """``job_fair_keys`` rows (mapping rows: fair_key, priority, weight, vtime)."""
    return [FairKey(r["fair_key"], int(r["priority"]), float(r["weight"]), float(r["vtime"]))
            for r in rows if r["priority"] is not None]


def start_times(keys: Iterable[FairKey]) -> dict[str, float]:
    """Each key's start: its virtual time, lifted to one unit before the busiest key's."""
    keys = list(keys)
    if not keys:
        return {}
    top = max(k.vtime for k in keys)
    return {k.key: max(k.vtime, top - 1.0) for k in keys}


def split(keys: Iterable[FairKey], start: Mapping[str, float], slots: int) -> dict[str, int]:
    """Hand ``slots`` out one at a time to the key finishing its next job first."""
    heap = [(start[k.key] + 1.0 / k.weight, k.key, 1.0 / k.weight) for k in keys]
    heapq.heapify(heap)
    quota: dict[str, int] = {}
    for _ in range(slots):
        if not heap:
            break
        finish, key, step = heap[0]
        quota[key] = quota.get(key, 0) + 1
        heapq.heapreplace(heap, (finish + step, key, step))
    return quota


class FairPlan:
    """One claim's rounds: ``round()`` says which keys to take how many jobs from (at
    one priority), ``served()`` takes what each gave, ``vtimes()`` what to write back."""

    def __init__(self, keys: list[FairKey], limit: int) -> None:
        self.remaining = limit
        self._keys = {k.key: k for k in keys}
        self._start = start_times(keys)
        self._served: dict[str, float] = {}
        #: Keys that gave fewer jobs than asked: none left this claimer may take (they
        #: require labels it lacks, are of tasks it does not serve, or are locked).
        self._dry: set[str] = set()
        #: (virtual finish time, order, row) of every claimed job
        self._claimed: list[tuple[float, int, Any]] = []

    def round(self) -> tuple[int, dict[str, int]] | None:
        """(priority, {key: jobs}) of the next round; None when the claim is done."""
        if self.remaining <= 0 or not self._keys:
            return None
        top = max(k.priority for k in self._keys.values())
        group = [k for k in self._keys.values() if k.priority == top]
        return top, split(group, self._start, self.remaining)

    def served(self, asked: Mapping[str, int], got: Mapping[str, list[Any]]) -> bool:
        """Record a round (each key's claimed rows, in its order); True when a key ran
        short (read the keys again: ``refresh``, then the next ``round``)."""
        short = False
        for key, n in asked.items():
            taken = got.get(key, [])
            step = 1.0 / self._keys[key].weight
            start = self._start[key]
            for i, row in enumerate(taken, 1):
                self._claimed.append((start + i * step, len(self._claimed), row))
            if taken:
                self._start[key] = self._served[key] = start + len(taken) * step
                self.remaining -= len(taken)
            if len(taken) < n:
                short = True
                self._dry.add(key)
        return short and self.remaining > 0

    def rows(self) -> list[Any]:
        """The claimed rows in turn order (by virtual finish time): keys interleaved."""
        return [row for _, _, row in sorted(self._claimed, key=lambda c: (c[0], c[1]))]

    def refresh(self, keys: list[FairKey]) -> None:
        """The keys as read again: their next priorities, our own virtual times."""
        fresh = {k.key: k for k in keys if k.key not in self._dry}
        top = max((s for s in self._start.values()), default=0.0)
        for key, k in fresh.items():
            if key not in self._start:
                self._start[key] = max(k.vtime, top - 1.0)
        self._keys = fresh

    def starts(self, keys: Iterable[str]) -> tuple[list[float], list[float]]:
        """The current start and weight of each of ``keys`` (a round's, before it is
        served): what a statement that writes the new virtual times needs."""
        keys = list(keys)
        return [self._start[k] for k in keys], [self._keys[k].weight for k in keys]

    def vtimes(self) -> dict[str, float]:
        """The virtual times of the keys this claim served."""
        return dict(self._served)


def rows_by_key(rows: Iterable[Any], at: int) -> dict[str, list[Any]]:
    """Claimed rows per fair key (column ``at``; no key counts as ``PLAIN``)."""
    got: dict[str, list[Any]] = {}
    for r in rows:
        got.setdefault(r[at] or PLAIN, []).append(r)
    return got


def keys_ahead(keys: Iterable[FairKey], key: str) -> int:
    """How many other keys with work take their turn before ``key``'s next one
    (``explain_job``'s "waiting its turn behind N other keys")."""
    keys = list(keys)
    start = start_times(keys)
    weights = {k.key: k.weight for k in keys}
    if key not in start:
        return 0
    mine = (start[key] + 1.0 / weights[key], key)
    return sum(1 for k in keys if k.key != key and (start[k.key] + 1.0 / k.weight, k.key) < mine)
