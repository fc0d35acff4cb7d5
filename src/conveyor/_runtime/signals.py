"""SIGTERM and SIGINT of a worker running in the main thread: the first stops it
gracefully (no new jobs, running ones get ``shutdown_timeout``), a second exits at once.

The undo puts back what each signal had before, not the defaults: the loop's
``remove_signal_handler`` resets SIGINT to Python's ``default_int_handler`` (and SIGTERM
to ``SIG_DFL``), which would drop ``asyncio.run()``'s own Ctrl-C handler (it cancels the
main task) after any worker run, and forget a handler the app gave the loop itself."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeAlias

log = logging.getLogger("conveyor.worker")

# What signal.getsignal() returns and signal.signal() takes.
_Handler: TypeAlias = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


def install_stop_signals(request_stop: Callable[[], None]) -> Callable[[], None]:
    """Route both signals to ``request_stop`` on the running loop; returns the undo, which
    puts back each signal's handler as it was (the process's, and the loop's own if it had
    one). Nothing is installed outside the main thread (Python delivers signals there only)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    loop = asyncio.get_running_loop()
    # The loop's own handlers (asyncio's Unix loops keep them there; other loops may not
    # say, and then only the process's handler is put back).
    handlers = getattr(loop, "_signal_handlers", None)
    loop_handlers: dict[int, object] = handlers if isinstance(handlers, dict) else {}
    presses = {"n": 0}

    def on_signal(signum: int) -> None:
        presses["n"] += 1
        if presses["n"] > 1:  # a second SIGINT or SIGTERM: no more waiting
            log.warning("second signal: exiting at once")
            os._exit(128 + signum)
        request_stop()

    # (signal, the process's handler before, the loop's handler before or None)
    installed: list[tuple[signal.Signals, _Handler, object | None]] = []

    def restore() -> None:
        while installed:
            sig, before, loop_before = installed.pop()  # the last installed first
            if loop_before is not None:
                # The loop's handler back in our place (its process-level handler, the
                # loop's no-op that wakes it, is the one add_signal_handler left).
                loop_handlers[sig] = loop_before
            else:
                loop.remove_signal_handler(sig)
            # None: a handler not set from Python, which Python cannot put back.
            if before is not None and signal.getsignal(sig) is not before:
                signal.signal(sig, before)

    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            before, loop_before = signal.getsignal(sig), loop_handlers.get(sig)
            try:
                loop.add_signal_handler(sig, on_signal, sig)
            except (NotImplementedError, RuntimeError):
                if loop_before is not None:  # a failed add drops the loop's handler
                    loop_handlers[sig] = loop_before
                continue
            installed.append((sig, before, loop_before))
    except BaseException:
        restore()  # one signal routed, the next failing otherwise: none left behind
        raise
    return restore
