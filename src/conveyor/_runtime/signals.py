"""SIGTERM and SIGINT of a worker running in the main thread: the first stops it
gracefully (no new jobs, running ones get ``shutdown_timeout``), a second exits at once."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from collections.abc import Callable

log = logging.getLogger("conveyor.worker")


def install_stop_signals(request_stop: Callable[[], None]) -> Callable[[], None]:
    """Route both signals to ``request_stop`` on the running loop; returns the undo.
    Nothing is installed outside the main thread (Python delivers signals there only)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    loop = asyncio.get_running_loop()
    presses = {"n": 0}

    def on_signal(signum: int) -> None:
        presses["n"] += 1
        if presses["n"] > 1:  # a second SIGINT or SIGTERM: no more waiting
            log.warning("second signal: exiting at once")
            os._exit(128 + signum)
        request_stop()

    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, on_signal, sig)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):
            pass

    def restore() -> None:
        for sig in installed:
            loop.remove_signal_handler(sig)

    return restore
