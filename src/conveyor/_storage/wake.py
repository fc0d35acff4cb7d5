"""In-process wake-ups: a tiny thread-safe fan-out owned by one Conveyor instance."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("conveyor.wake")

#: Called with a queue name (or "*" for any queue) when jobs may be ready.
WakeCallback = Callable[[str], None]


class WakeHub:
    """Fans a "jobs may be ready in queue X" signal out to every subscriber.

    Callbacks may be called from any thread; subscribers hop to their own loop.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: list[WakeCallback] = []
        self._finished: WakeHub | None = None

    @property
    def finished(self) -> WakeHub:
        """A second hub, apart from the queue wake-ups: jobs reached a final state (what
        ``job.wait`` listens to), so that producers are never woken by completions."""
        hub = self._finished  # the hot path (every ack batch on SQLite): no lock
        if hub is not None:
            return hub
        with self._lock:
            if self._finished is None:
                self._finished = WakeHub()
            return self._finished

    def subscribe(self, callback: WakeCallback) -> Callable[[], None]:
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    @property
    def has_subscribers(self) -> bool:
        return bool(self._subscribers)

    def notify(self, queue: str) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for callback in subscribers:
            try:
                callback(queue)
            except Exception:  # one broken subscriber must not starve the others
                log.exception("wake subscriber failed")
