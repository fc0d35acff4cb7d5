"""A batch of inserts made as they are read: what lets a PostgreSQL COPY start before
the whole batch is encoded, so the server inserts the first rows while the client
validates and encodes the next ones (``postgres/copy_insert.py`` reads it in chunks).

What a backend must know before the first row (is the batch plain, which queues it
wakes) is given up front by whoever made it, from the jobs' specs. A job that fails
validation raises when its chunk is read: the statement under way is aborted and its
transaction rolled back, so nothing of the batch is written, as when every job was
validated before the write. Any other use (iterating, ``len`` aside) reads it whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import overload

from .job_types import JobInsert

#: Makes the inserts of jobs ``start`` to ``stop`` (validated and encoded).
Convert = Callable[[int, int], list[JobInsert]]


class LazyInserts(Sequence[JobInsert]):
    """``count`` inserts, made ``convert(start, stop)`` a chunk at a time, once each."""

    def __init__(self, count: int, convert: Convert, *, plain: bool,
                 queues: frozenset[str]) -> None:
        self._count, self._convert = count, convert
        self._made: list[JobInsert] = []
        #: No job has a unique key, requires labels or has an expiry (the plain paths
        #: take the batch).
        self.plain = plain
        #: The queues the jobs name (validated with their job, when it is made).
        self.queues = queues

    def __len__(self) -> int:
        return self._count

    def _upto(self, stop: int) -> list[JobInsert]:
        made = self._made
        if len(made) < stop:
            made += self._convert(len(made), min(stop, self._count))
        return made

    @overload
    def __getitem__(self, index: int) -> JobInsert: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[JobInsert]: ...

    def __getitem__(self, index: int | slice) -> JobInsert | Sequence[JobInsert]:
        if isinstance(index, slice):
            start, stop, _ = index.indices(self._count)
            return self._upto(max(stop, start))[index]
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError(index)
        return self._upto(index + 1)[index]

    def __iter__(self) -> Iterator[JobInsert]:
        return iter(self._upto(self._count))


def is_plain(jobs: Sequence[JobInsert]) -> bool:
    """Not empty, no unique key to check, no labels required, no expiry and no fair
    key (the plain statements and COPY write none of them); read from ``LazyInserts``
    without making its jobs."""
    if isinstance(jobs, LazyInserts):
        return jobs.plain and len(jobs) > 0
    return bool(jobs) and all(j.unique_key is None is j.requires_json and j.expires_in is None
                              and j.expires_at is None and j.fair_key is None for j in jobs)


def queues_of(jobs: Sequence[JobInsert]) -> list[str]:
    """The queues of ``jobs``, sorted (from ``LazyInserts`` without making its jobs)."""
    if isinstance(jobs, LazyInserts):
        return sorted(jobs.queues)
    return sorted({j.queue for j in jobs})
