"""The sync API's one bridge to the async core: a private event loop on a thread.

A script that never calls ``close()`` must still exit silently: at interpreter exit
the portal runs its cleanup (closing the connections) on its loop, then stops it.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures.thread
import contextlib
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Portal:
    """Runs coroutines on a background loop for synchronous callers.

    Example: ``Portal().call(app.get_job_async(1))``
    """

    def __init__(self, cleanup: Callable[[], Coroutine[Any, Any, None]] | None = None) -> None:
        #: Run on the loop before it stops (the app closes its connections there).
        self._cleanup = cleanup
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def _start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def serve() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                self._thread = threading.Thread(target=serve, name="conveyor-portal", daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
                _at_exit(_stop_at_exit, weakref.ref(self))
            return self._loop

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        return self._loop

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = self._start()
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a sync Conveyor method was called from inside its own loop")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def stop(self, timeout: float = 10.0) -> None:
        """Run the cleanup on the loop, then stop it and its thread (idempotent)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        if self._cleanup is not None and threading.current_thread() is not thread:
            future = asyncio.run_coroutine_threadsafe(self._cleanup(), loop)
            with contextlib.suppress(Exception):
                future.result(timeout)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        if not thread.is_alive():
            loop.close()


def _at_exit(call: Callable[[weakref.ref[Portal]], None], ref: weakref.ref[Portal]) -> None:
    """Run ``call`` at exit before the thread pools stop taking work (closing a
    connection uses one): threading's own exit hooks run in reverse order of
    registration, and concurrent.futures registered its hook at import, above."""
    register: Callable[..., Any] = getattr(threading, "_register_atexit", atexit.register)
    assert concurrent.futures.thread  # imported for its exit hook's order
    register(call, ref)


def _stop_at_exit(ref: weakref.ref[Portal]) -> None:
    portal = ref()
    if portal is not None:
        portal.stop()
