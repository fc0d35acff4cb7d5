"""A worker run under ``asyncio.run()`` puts SIGTERM and SIGINT back as it found them:
the process's handlers (``asyncio.run()``'s own Ctrl-C handler, which cancels the main
task, or one the program set with ``signal.signal``) and the loop's own handlers (one the
program gave it with ``loop.add_signal_handler``), the very same objects, and real
signals sent after the run reach them. During the run, a real SIGTERM stops the worker."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from conveyor import Conveyor, WorkerConfig

SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _app(tmp_path: Path) -> tuple[Conveyor, list[int]]:
    app = Conveyor(f"sqlite:///{tmp_path}/jobs.db")
    ran: list[int] = []

    @app.task
    async def note(i: int) -> None:
        ran.append(i)

    note.enqueue(1)
    return app, ran


def _state() -> dict[str, Any]:
    """The process's handlers of both signals, the loop's own (the same Handle objects)
    and the wake-up fd a signal writes to."""
    loop = asyncio.get_running_loop()
    fd = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(fd)
    handlers = loop._signal_handlers  # type: ignore[attr-defined]
    return {"process": {sig: signal.getsignal(sig) for sig in SIGNALS},
            "loop": {sig: handlers.get(sig) for sig in SIGNALS},
            "others": {sig: h for sig, h in handlers.items() if sig not in SIGNALS},
            "wakeup_fd": fd}


async def _until(check: Any, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_a_burst_run_leaves_asyncio_runs_ctrl_c_handler(tmp_path: Path) -> None:
    app, ran = _app(tmp_path)
    seen: dict[str, Any] = {}
    outcome: list[str] = []

    async def main() -> None:
        seen["before"] = _state()
        await asyncio.wait_for(app.run_worker(
            config=WorkerConfig(burst=True),
            on_started=lambda: seen.update(during=_state())), 60)
        await app.close_async()
        seen["after"] = _state()
        assert seen["after"] == seen["before"]
        # Ctrl-C now is asyncio.run()'s again: it cancels this task (not a
        # KeyboardInterrupt raised wherever the code is), and asyncio.run() then raises.
        try:
            os.kill(os.getpid(), signal.SIGINT)
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise
        except KeyboardInterrupt:
            outcome.append("KeyboardInterrupt in the task")
            raise

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(main())
    assert ran == [1]
    before, during = seen["before"], seen["during"]
    # asyncio.run()'s handler before; the loop had none of its own
    assert getattr(before["process"][signal.SIGINT], "func", None) is not None
    assert before["loop"] == {signal.SIGTERM: None, signal.SIGINT: None}
    assert all(during["loop"][sig] is not None for sig in SIGNALS)  # the worker's
    assert during["process"] != before["process"]
    assert outcome == ["cancelled"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # asyncio.run's undo


def test_a_run_stopped_by_sigterm_gives_back_the_programs_own_handlers(
        tmp_path: Path) -> None:
    app, ran = _app(tmp_path)
    got: list[str] = []

    def on_sigterm_process(signum: int, frame: FrameType | None) -> None:
        got.append("process SIGTERM")

    previous = signal.signal(signal.SIGTERM, on_sigterm_process)
    seen: dict[str, Any] = {}

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, got.append, "loop SIGINT")
        loop.add_signal_handler(signal.SIGHUP, got.append, "loop SIGHUP")
        seen["before"] = _state()
        started = asyncio.Event()
        runner = asyncio.create_task(app.run_worker(on_started=started.set))
        await asyncio.wait_for(started.wait(), 30)
        await _until(lambda: ran == [1])
        seen["during"] = _state()
        os.kill(os.getpid(), signal.SIGTERM)  # the worker's: a graceful stop
        await asyncio.wait_for(runner, 30)
        await app.close_async()
        seen["after"] = _state()
        assert seen["after"] == seen["before"]
        assert got == []  # the worker had both signals while it ran
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            os.kill(os.getpid(), sig)
        await _until(lambda: len(got) == 3)
        for sig in (signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)

    try:
        asyncio.run(main())
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert sorted(got) == ["loop SIGHUP", "loop SIGINT", "process SIGTERM"]
    before, during = seen["before"], seen["during"]
    assert before["process"][signal.SIGTERM] is on_sigterm_process
    assert before["loop"][signal.SIGINT] is not None
    assert during["loop"][signal.SIGINT] is not before["loop"][signal.SIGINT]
    assert during["process"][signal.SIGTERM] is not on_sigterm_process
