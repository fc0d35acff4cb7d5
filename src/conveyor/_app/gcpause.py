"""The cyclic garbage collector paused for one large ``enqueue_many``.

Such a call makes a few objects per job that the collector tracks (the specs, their
arguments, the inserts, the Jobs returned), all alive until it returns, none of them
garbage. Each full collection the allocations trigger walks every one of them again:
on a batch of 10,000 no-op jobs that was about 40% of the call's CPU, and 1.27x the
throughput to be had (1.09-1.96 over 6 interleaved pairs, PostgreSQL; SQLite 1.23x).
So the collector waits until the call returns; cycles made meanwhile (other threads,
other coroutines) are collected then. Reference counting, which frees nearly
everything, never stops.
A program that disabled the collector itself finds it still disabled.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

#: Calls with fewer jobs keep the collector on (below this there was nothing to gain).
MIN_JOBS = 2000


@contextlib.contextmanager
def paused_for(jobs: int) -> Iterator[None]:
    """The collector paused while a call writes ``jobs`` jobs, if that many."""
    if jobs < MIN_JOBS or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
