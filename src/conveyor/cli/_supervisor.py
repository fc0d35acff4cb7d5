"""Running worker processes: the supervisor behind ``conveyor worker --processes N``, and
a prompt exit when sync handlers ignore the stop."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from types import FrameType


def exit_if_handlers_linger(grace: float = 0.5) -> None:
    """After the worker stopped, do not wait for sync handlers still running.

    Their jobs were already given back at the shutdown timeout; Python cannot stop a
    thread, and the interpreter would otherwise wait for each one at exit, holding the
    process (and the job's side effects) alive long past ``--shutdown-timeout``.
    """
    deadline = time.monotonic() + grace
    lingering = []
    for thread in threading.enumerate():
        if thread.name.startswith("conveyor-job"):
            thread.join(max(deadline - time.monotonic(), 0))
            if thread.is_alive():
                lingering.append(thread)
    if not lingering:
        return
    logging.getLogger("conveyor.worker").warning(
        "%d sync handler(s) ignored the stop and still run; their jobs were given back, "
        "exiting without them", len(lingering))
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _exit_code(returncode: int) -> int:
    """A child killed by signal N (returncode -N) counts as the shell's 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def supervise(argv: list[str], processes: int, poll: float = 0.1) -> int:
    """Run ``processes`` children, forward SIGTERM/SIGINT, return the worst exit code.

    Children get their own process group, so a terminal's Ctrl-C reaches them only
    once, through us. If one child fails, the others are asked to stop too.
    """
    children = [subprocess.Popen(argv, process_group=0) for _ in range(processes)]
    stopping = False

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while any(child.poll() is None for child in children):
            failed = any(child.returncode not in (None, 0) for child in children)
            if failed and not stopping:
                forward(signal.SIGTERM, None)
            time.sleep(poll)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return max(_exit_code(child.returncode) for child in children)
