"""A large ``enqueue_many`` pauses the cyclic garbage collector while it runs
(``_app/gcpause.py``), and always leaves it as it found it."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from typing import Any

import pytest

from conveyor import Conveyor, PayloadTooLargeError
from conveyor._app.gcpause import MIN_JOBS


@pytest.fixture
def collector() -> Iterator[list[bool]]:
    """Whether the collector was enabled at each storage write; restored afterwards."""
    was = gc.isenabled()
    yield []
    if was:
        gc.enable()
    else:
        gc.disable()


def watch(app: Conveyor, seen: list[bool]) -> None:
    class Watched:
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def __getattr__(self, name: str) -> Any:
            attr = getattr(self._inner, name)
            if not name.startswith("job_insert"):
                return attr

            def call(*args: Any, **kwargs: Any) -> Any:
                seen.append(gc.isenabled())
                return attr(*args, **kwargs)

            return call

    app.wrap_storage(Watched)


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_large_enqueue_many_pauses_the_collector_and_restores_it(
        app: Conveyor, collector: list[bool], api: str) -> None:
    watch(app, collector)

    @app.task
    def noop(i: Any) -> None: ...

    def enqueue(specs: list[Any]) -> Any:
        if api == "sync":
            return app.enqueue_many(specs)
        return asyncio.run(app.enqueue_many_async(specs))

    noop.enqueue(-1)
    gc.enable()
    collector.clear()
    assert len(enqueue([noop.job(i) for i in range(MIN_JOBS)])) == MIN_JOBS
    assert enqueue([noop.job(i) for i in range(3)])
    assert collector[0] is False and collector[-1] is True and gc.isenabled()
    with pytest.raises(PayloadTooLargeError):  # refused: the collector is back on all the same
        enqueue([noop.job(i) for i in range(MIN_JOBS)] + [noop.job("x" * 2_000_000)])
    assert gc.isenabled()
    gc.disable()  # the program's own choice stays
    enqueue([noop.job(i) for i in range(MIN_JOBS)])
    assert not gc.isenabled()
