"""Running worker processes: the supervisor behind ``conveyor worker --processes N``
(it replaces a child that asks to be recycled or dies, backing off when children die
right after starting), and a prompt exit when sync handlers ignore the stop."""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from types import FrameType

from .._config import HANDOFF_ENV, WATCHDOG_ENV


def exit_if_handlers_linger(grace: float = 0.5, code: int = 0) -> None:
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
    log.warning("%d sync handler(s) ignored the stop and still run; their jobs were given "
                "back, exiting without them", len(lingering))
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


log = logging.getLogger("conveyor.worker")

#: A child's "recycle me" exit status (EX_TEMPFAIL): it reached --max-jobs-per-child,
#: --max-memory-per-child or a hard time limit, drained, and wants a replacement.
RECYCLE_EXIT = 75
#: A child that dies sooner than this after its start counts as a crash loop: its
#: restarts wait 1 s, 2 s, 4 s ... up to MAX_BACKOFF.
FAST_DEATH = 10.0
MAX_BACKOFF = 30.0
#: Exit statuses of a child that could not start (usage, database unreachable, schema
#: not migrated): on a first start they stop the supervisor, as restarting cannot help.
STARTUP_FAILURES = frozenset({2, 3, 4})
#: With a hard time limit, each child tells the supervisor its leases and its sync
#: handlers' hard deadlines through a pipe (this variable names its fd in the child; the
#: protocol is in conveyor._runtime.hardlimit). A child still alive this many seconds
#: past one (it should have recycled itself: a handler in C code holding the GIL stops
#: it) is killed with SIGKILL, and its replacement settles its jobs (HANDOFF_ENV). The
#: two environment names are conveyor._config's, read by the child.
WATCHDOG_MARGIN = 5.0
#: Overrides WATCHDOG_MARGIN (seconds): the tests shorten it.
MARGIN_ENV = "CONVEYOR_WATCHDOG_MARGIN"
#: The supervisor's pid, given to each child (``follow_supervisor``).
PARENT_ENV = "CONVEYOR_SUPERVISOR_PID"
#: Linux's prctl option: the signal this process gets when its parent dies.
PR_SET_PDEATHSIG = 1


def follow_supervisor() -> bool:
    """In a supervised child: stop as on SIGTERM (stop claiming, finish or give back the
    running jobs) when the supervisor dies, even by SIGKILL, instead of running on
    unsupervised. The children have process groups of their own (so a terminal's Ctrl-C
    reaches them once, through the supervisor), so nothing else would stop them.

    Linux only (``prctl(PR_SET_PDEATHSIG)``); elsewhere returns False and a child
    outlives a killed supervisor. A supervisor that died before the call is caught by
    comparing the parent pid."""
    parent = os.environ.pop(PARENT_ENV, "")
    if not parent.isdigit() or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != int(parent):  # it died between our start and the prctl
        os.kill(os.getpid(), signal.SIGTERM)
    return True


def _exit_code(returncode: int) -> int:
    """A child killed by signal N (returncode -N) counts as the shell's 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def describe_exit(returncode: int) -> str:
    """``-9`` -> ``killed by SIGKILL``; ``3`` -> ``exit code 3``."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


@dataclasses.dataclass
class Child:
    """One slot of the supervisor: its process now, and what happened to the ones before."""

    index: int
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    restarts: int = 0
    fast_deaths: int = 0
    last_death: str | None = None
    restart_at: float | None = None  # a dead child's replacement waits until then
    done: bool = False  # exited 0 (burst) or during a stop: not replaced
    watch_fd: int | None = None  # the watchdog pipe's read end
    #: job -> (hard deadline, soft deadline) of its sync handler's thread (epoch s)
    deadlines: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    #: job -> (lease token, when the supervisor heard of it) of the child's claimed jobs
    leases: dict[str, tuple[str, float]] = dataclasses.field(default_factory=dict)
    node: str | None = None
    pending: bytes = b""
    handoff: bytes | None = None  # what the replacement of a killed child settles


class Supervisor:
    """Runs ``processes`` children of ``argv`` and keeps them running until stopped."""

    def __init__(self, argv: list[str], processes: int, watchdog: bool = False) -> None:
        self.argv = argv
        self.watchdog = watchdog
        self.margin = float(os.environ.get(MARGIN_ENV) or WATCHDOG_MARGIN)
        self.children = [Child(i) for i in range(processes)]
        self.stopping = False
        self.codes: list[int] = []
        self.fatal = 0  # the exit status of a child that could not start

    def start(self, child: Child) -> None:
        argv = list(self.argv)
        if child.restarts:  # shown with the node: conveyor status, the workers page
            argv += ["--label", f"conveyor.restarts={child.restarts}"]
            if child.last_death:
                argv += ["--label", f"conveyor.last-death={child.last_death}"]
        if not self.watchdog:
            child.proc = subprocess.Popen(argv, process_group=0,
                                          env={**os.environ, PARENT_ENV: str(os.getpid())})
        else:
            self._start_watched(child, argv)
        child.started, child.restart_at = time.monotonic(), None

    def _start_watched(self, child: Child, argv: list[str]) -> None:
        """Start the child with a fresh watchdog pipe, and the handoff of the child it
        replaces (killed at a hard time limit) in an unlinked file, if any."""
        if child.watch_fd is not None:
            os.close(child.watch_fd)
        read, write = os.pipe()
        os.set_blocking(read, False)
        env = {**os.environ, WATCHDOG_ENV: str(write), PARENT_ENV: str(os.getpid())}
        fds = [write]
        with contextlib.ExitStack() as files:
            if child.handoff is not None:
                handoff = files.enter_context(tempfile.TemporaryFile())
                handoff.write(child.handoff)
                handoff.flush()
                env[HANDOFF_ENV] = str(handoff.fileno())
                fds.append(handoff.fileno())
            try:
                child.proc = subprocess.Popen(argv, process_group=0, pass_fds=fds, env=env)
            finally:
                os.close(write)
        child.watch_fd, child.pending, child.handoff = read, b"", None
        child.deadlines, child.leases, child.node = {}, {}, None

    def _read(self, child: Child) -> None:
        """Take in the lines the child wrote (see conveyor._runtime.hardlimit)."""
        assert child.watch_fd is not None
        try:
            while chunk := os.read(child.watch_fd, 65536):
                child.pending += chunk
        except BlockingIOError:
            pass
        *lines, child.pending = child.pending.split(b"\n")
        now = time.time()
        for line in lines:
            kind, text = line[:1], line[1:].decode(errors="replace")
            fields = text.split()
            if kind == b"=" and len(fields) == 2:
                child.leases[fields[0]] = (fields[1], now)
            elif kind == b"~":
                for job in fields:
                    child.leases.pop(job, None)
            elif kind == b"+" and len(fields) >= 2:
                hard = float(fields[1])
                child.deadlines[fields[0]] = (hard, float(fields[2]) if len(fields) > 2 else hard)
            elif kind == b"-":
                child.deadlines.pop(text, None)
            elif kind == b"N":
                child.node = text

    def watch(self, child: Child) -> None:
        """Read the child's leases and hard deadlines; kill it when one is long past."""
        if child.watch_fd is None or child.proc is None:
            return
        self._read(child)
        now = time.time()
        late = sorted(j for j, (hard, _) in child.deadlines.items() if hard + self.margin < now)
        if late and child.proc.poll() is None:
            log.error("worker child %d (pid %d) did not recycle itself with job(s) %s past "
                      "their hard time limit: killing it", child.index, child.proc.pid,
                      ", ".join(late))
            child.proc.kill()
            child.handoff = self._handoff(child, child.proc.pid, time.time())

    @staticmethod
    def _handoff(child: Child, pid: int, now: float) -> bytes:
        """The killed child's jobs for its replacement: those past their soft timeout
        fail with TaskTimedOut, the others go back without using an attempt."""
        timed_out: list[tuple[int, int, float]] = []
        given_back: list[tuple[int, int, float]] = []
        for job, (token, seen) in child.leases.items():
            if not (job.isdigit() and token.lstrip("-").isdigit()):
                continue
            entry = (int(job), int(token), seen)
            deadline = child.deadlines.get(job)
            (timed_out if deadline is not None and deadline[1] <= now else given_back).append(entry)
        log.warning("its replacement will fail %d job(s) of pid %d past their timeout with "
                    "TaskTimedOut and give %d other(s) back without using an attempt",
                    len(timed_out), pid, len(given_back))
        child.deadlines.clear()
        child.leases.clear()
        return json.dumps({"pid": pid, "node": child.node, "killed_at": now,
                           "timed_out": timed_out, "given_back": given_back}).encode()

    def forward(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        for child in self.children:
            if child.proc is not None and child.proc.poll() is None:
                child.proc.send_signal(signum)

    def check(self, child: Child, now: float) -> None:
        """A child that exited is replaced: at once when it asked to be recycled or lived
        long, after a growing delay when it died right after starting."""
        proc = child.proc
        if proc is None:
            if child.restart_at is not None and now >= child.restart_at and not self.stopping:
                self.start(child)
            return
        rc = proc.poll()
        if rc is None:
            return
        child.proc = None
        if self.stopping or rc == 0:
            child.done = True
            self.codes.append(_exit_code(rc))
            return
        lived = now - child.started
        if rc in STARTUP_FAILURES and child.restarts == 0 and lived < FAST_DEATH:
            log.error("worker child %d (pid %d) could not start (exit code %d); stopping",
                      child.index, proc.pid, rc)
            child.done = True
            self.fatal = self.fatal or rc
            self.forward(signal.SIGTERM, None)
            return
        child.restarts += 1
        if child.handoff is not None:  # killed by the watchdog: not a crash
            log.warning("worker child %d (pid %d) killed at a hard time limit after %.1fs "
                        "(%s); starting a replacement", child.index, proc.pid, lived,
                        describe_exit(rc))
            child.last_death, child.fast_deaths = "hard-time-limit", 0
            self.start(child)
            return
        if rc == RECYCLE_EXIT:
            log.info("worker child %d (pid %d) recycled itself after %.1fs; starting a "
                     "replacement", child.index, proc.pid, lived)
            child.fast_deaths = 0
            self.start(child)
            return
        child.last_death = describe_exit(rc).removeprefix("killed by ").replace(" ", "-")
        child.fast_deaths = child.fast_deaths + 1 if lived < FAST_DEATH else 0
        delay = min(2.0 ** (child.fast_deaths - 1), MAX_BACKOFF) if child.fast_deaths else 0.0
        log.warning("worker child %d (pid %d) died: %s after %.1fs; restart #%d in %.0fs",
                    child.index, proc.pid, describe_exit(rc), lived, child.restarts, delay)
        child.restart_at = now + delay

    def run(self, poll: float) -> int:
        for child in self.children:
            self.start(child)
        previous = {sig: signal.signal(sig, self.forward)
                    for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            while not all(child.done or (self.stopping and child.proc is None)
                          for child in self.children):
                now = time.monotonic()
                for child in self.children:
                    self.watch(child)
                    self.check(child, now)
                time.sleep(poll)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return self.fatal or max(self.codes, default=0)


def supervise(argv: list[str], processes: int, poll: float = 0.1,
              watchdog: bool = False) -> int:
    """Run ``processes`` children, forward SIGTERM/SIGINT, return the worst exit code of
    the last children.

    Children get their own process group, so a terminal's Ctrl-C reaches them only
    once, through us. A child that cannot start (exit 2, 3 or 4 right away) stops them
    all. A child that exits on its own other than with 0 (``--burst``: the queues are
    empty) is replaced: one that asks to be recycled at once, one that died
    (a crash, an OOM kill) after a delay that grows while children die right after
    starting; each replacement carries ``conveyor.restarts`` (and ``conveyor.last-death``)
    labels, shown with its node.
    """
    return Supervisor(argv, processes, watchdog).run(poll)
