"""Single enqueues pipelined: concurrent ``enqueue_async`` calls of one event loop are
written together.

A single insert costs a round trip and a commit, far more than the statement itself.
While one is in flight, the calls that arrive queue up, and as soon as it returns they
go in as one batch (one statement, one commit), up to ``max_batch`` at a time. A lone
caller pays nothing for this: with nothing in flight its job is written at once.

Each caller gets its own Job back. Should a batch fail, its jobs are written again one
by one, so that one caller's error is never another's; unless the database itself is
away (``DatabaseUnavailableError``): then every caller of the batch gets that error at
once, nothing of the batch written (one transaction), rather than one more attempt, and
one more wait for the database, per caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from .._errors import DatabaseUnavailableError
from .._job import Job
from .._storage import JobInsert

Write = Callable[[Sequence[JobInsert]], Awaitable[list[Job]]]


class InsertPipeline:
    """The single enqueues of one loop's storage; ``write`` inserts a batch."""

    def __init__(self, owner: object, write: Write, max_batch: int) -> None:
        #: The storage this pipeline writes to (a new storage gets a new pipeline).
        self.owner = owner
        self._write = write
        self._max_batch = max_batch
        self._pending: list[tuple[JobInsert, asyncio.Future[Job]]] = []
        self._writing = False
        self._drainer: asyncio.Task[None] | None = None

    async def insert(self, job: JobInsert) -> Job:
        """Write ``job`` (alone, or with the jobs that wait with it) and return it."""
        if self._writing:
            future: asyncio.Future[Job] = asyncio.get_running_loop().create_future()
            self._pending.append((job, future))
            return await future
        self._writing = True
        try:
            return (await self._write([job]))[0]
        finally:
            self._hand_over()

    def _hand_over(self) -> None:
        if self._pending:
            self._drainer = asyncio.get_running_loop().create_task(self._drain())
        else:
            self._writing = False

    async def _drain(self) -> None:
        try:
            while self._pending:
                batch = self._pending[:self._max_batch]
                del self._pending[:self._max_batch]
                await self._write_batch(batch)
        except BaseException as exc:  # cancelled with the loop: nobody may wait forever
            for _, future in self._pending:
                if not future.done():
                    future.set_exception(exc)
            self._pending.clear()
            raise
        finally:
            self._writing = False
            self._drainer = None

    async def _write_batch(self, batch: Sequence[tuple[JobInsert, asyncio.Future[Job]]]) -> None:
        try:
            try:
                jobs = await self._write([job for job, _ in batch])
            except Exception as exc:
                if len(batch) == 1 or isinstance(exc, DatabaseUnavailableError):
                    raise
                for one in batch:  # find whose job failed: each caller gets its own outcome
                    await self._write_batch([one])
                return
        except BaseException as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, future), written in zip(batch, jobs, strict=True):
            if not future.done():
                future.set_result(written)
