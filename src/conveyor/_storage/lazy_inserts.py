"""A batch of inserts made as they are read, in runs: what lets a PostgreSQL COPY start
before the whole batch is encoded, so the server inserts the first rows while the
client validates and encodes the next ones (``postgres/copy_insert.py`` reads it in
chunks), and lets it encode the part of a row that a run of jobs shares once.

What a backend must know before the first row (is the batch plain, which queues it
wakes) is given up front by whoever made it, from the jobs' specs. A job that fails
validation raises when its chunk is read: the statement under way is aborted and its
transaction rolled back, so nothing of the batch is written, as when every job was
validated before the write. Any other use (iterating, ``len`` aside) reads it whole.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import overload

from .job_types import JobInsert
from .rows import insert_with_arguments


@dataclasses.dataclass(frozen=True, slots=True)
class InsertRun:
    """Jobs alike but for their positional arguments: ``base`` with each of ``args`` as
    its ``args_json`` in turn (``kwargs_json`` as ``base``'s). ``task.job(...)`` in a
    loop makes one run, so the shared part of the rows and of the Jobs is made once
    per run instead of once per job; any other job is a run of one."""

    base: JobInsert
    args: list[str]

    @classmethod
    def of(cls, insert: JobInsert) -> InsertRun:
        return cls(insert, [insert.args_json])

    def inserts(self) -> list[JobInsert]:
        """The run's jobs, one insert each."""
        base, args = self.base, self.args
        if len(args) == 1 and args[0] is base.args_json:
            return [base]
        kwargs = base.kwargs_json
        return [insert_with_arguments(base, text, kwargs) for text in args]


#: Makes the runs of jobs from ``start`` on, at least to ``stop`` (validated and encoded).
Convert = Callable[[int, int], list[InsertRun]]


class LazyInserts(Sequence[JobInsert]):
    """``count`` inserts, made ``convert(start, stop)`` a chunk at a time, once each;
    read as runs (``runs``, what COPY reads) or as inserts."""

    def __init__(self, count: int, convert: Convert, *, plain: bool,
                 queues: frozenset[str]) -> None:
        self._count, self._convert = count, convert
        self._runs: list[InsertRun] = []
        self._starts: list[int] = []  # the index of each run's first job
        self._covered = 0
        self._made: list[JobInsert] = []
        #: No job has a unique key, requires labels or has an expiry (the plain paths
        #: take the batch).
        self.plain = plain
        #: The queues the jobs name (validated with their job, when it is made).
        self.queues = queues

    def __len__(self) -> int:
        return self._count

    def cover(self, stop: int) -> None:
        """Make (validate and encode) the jobs up to ``stop``, if not yet."""
        stop = min(stop, self._count)
        while self._covered < stop:
            for run in self._convert(self._covered, stop):
                self._runs.append(run)
                self._starts.append(self._covered)
                self._covered += len(run.args)

    def runs(self, start: int, stop: int) -> list[InsertRun]:
        """The runs of jobs ``start`` to ``stop``, cut where the range cuts them."""
        stop = min(stop, self._count)
        if start >= stop:
            return []
        self.cover(stop)
        first = bisect.bisect_right(self._starts, start) - 1
        out: list[InsertRun] = []
        runs, starts = self._runs, self._starts
        for i in range(first, len(runs)):
            run, at = runs[i], starts[i]
            if at >= stop:
                break
            lo, hi = max(start - at, 0), min(stop - at, len(run.args))
            out.append(run if (lo, hi) == (0, len(run.args)) else
                       InsertRun(run.base, run.args[lo:hi]))
        return out

    def _upto(self, stop: int) -> list[JobInsert]:
        made = self._made
        if len(made) < stop:
            made += [job for run in self.runs(len(made), stop) for job in run.inserts()]
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


def made_batches(runs: Sequence[InsertRun], size: int) -> list[LazyInserts]:
    """``runs``, made already (every job validated), cut in batches of at most ``size``
    jobs that keep their runs for COPY; whether each batch is plain and which queues it
    wakes are read from its runs' bases (a run's jobs share all but their arguments)."""
    parts: list[list[InsertRun]] = [[]]
    room = size
    for run in runs:
        args = run.args
        while args:
            if room == 0:
                parts.append([])
                room = size
            take, args = args[:room], args[room:]
            parts[-1].append(run if len(take) == len(run.args) else InsertRun(run.base, take))
            room -= len(take)
    return [_made(part) for part in parts if part]


def lazy_batches(whole: LazyInserts, size: int,
                 parts: Sequence[tuple[bool, frozenset[str]]]) -> list[LazyInserts]:
    """``whole`` cut in batches of at most ``size`` jobs (``parts``: each one's
    ``plain`` and ``queues``), made as they are read. Reading the first batch makes
    the later ones too, in step with it, and its last chunk makes what is left: every
    job is validated before the first batch's transaction ends (a refused job aborts
    it, and nothing is written), yet the server inserts the first batch's rows while the
    client makes the rest, which it did beforehand when all were made first."""
    count = len(whole)

    def view(start: int, stop: int, first: bool) -> Convert:
        def convert(lo: int, hi: int) -> list[InsertRun]:
            if first:  # the whole call in step with this batch, all of it by its end
                whole.cover(count if hi >= stop - start else hi * count // (stop - start))
            return whole.runs(start + lo, start + hi)
        return convert

    out = []
    for k, start in enumerate(range(0, count, size)):
        stop = min(start + size, count)
        plain, queues = parts[k]
        out.append(LazyInserts(stop - start, view(start, stop, k == 0), plain=plain,
                               queues=queues))
    return out


def _made(runs: list[InsertRun]) -> LazyInserts:
    """A batch whose runs are made: its first read takes them all."""
    bases = [run.base for run in runs]
    return LazyInserts(sum(len(run.args) for run in runs), lambda start, stop: runs,
                       plain=is_plain(bases), queues=frozenset(b.queue for b in bases))


def runs_of(jobs: Sequence[JobInsert], start: int, stop: int) -> list[InsertRun]:
    """Jobs ``start`` to ``stop`` as runs: ``LazyInserts``' own, else a run per job."""
    if isinstance(jobs, LazyInserts):
        return jobs.runs(start, stop)
    return [InsertRun.of(job) for job in jobs[start:stop]]


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
