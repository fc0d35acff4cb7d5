"""LISTEN/NOTIFY wake-ups on PostgreSQL: one connection per storage listens while any
producer subscribes, and fans notifications out to the in-process WakeHub.

Statements that make jobs ready send their own NOTIFY, so wake-ups reach every process
and never fire for a rolled-back write. Statements that make jobs final NOTIFY a second
channel (``finished_channel``); a second Listener listens to it only while some
``job.wait`` waits in this process.

LISTEN is session state: behind a transaction pooler it connects to ``listen_url``
(directly to PostgreSQL), or, without one, does not run at all: producers then poll at
the backend's poll interval and the storage wakes its own process's producers, which
the log says once (a WARNING with what to do); waiters fall back to their re-checks.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

import psycopg
from psycopg import sql

from ..wake import WakeCallback, WakeHub
from .connection import LISTEN_ENV, LISTEN_OPTION, Errors, PostgresConfig, connect_kwargs

log = logging.getLogger("conveyor.postgres")

_BACKOFF_MIN, _BACKOFF_MAX = 0.1, 5.0
#: How long the listener waits for a notification before pinging its connection.
_LISTEN_PING = 30.0


def finished_channel(channel: str) -> str:
    """The channel final-state statements NOTIFY: within PostgreSQL's 63 characters."""
    return f"{channel[:54]}_finished"


class Listener:
    def __init__(self, config: PostgresConfig, hub: WakeHub, errors: Errors,
                 channel: str | None = None) -> None:
        self._config, self._hub = config, hub
        self._channel = channel or config.channel
        self._url = config.listen_url or config.url
        self._errors = errors if config.listen_url is None else Errors(config.listen_url)
        self._lock = threading.Lock()
        self._listeners = 0
        self._task: asyncio.Task[None] | None = None
        self._warned = False

    def use_pooler(self, config: PostgresConfig) -> None:
        """The storage found a transaction pooler on ``url`` and said so: poll from now
        on, unless a listen URL reaches PostgreSQL directly."""
        self._config = config
        with self._lock:
            self._warned = True  # the storage's warning already named the fix
        if self.polling:
            self.stop()

    @property
    def polling(self) -> bool:
        """True when no LISTEN runs: behind a transaction pooler with no listen URL."""
        return self._config.pooled and self._config.listen_url is None

    def _warn_polling(self) -> None:
        """Once per storage: the operator learns why wake-ups are slower and the fix."""
        with self._lock:
            if self._warned:
                return
            self._warned = True
        log.warning(
            "behind a transaction pooler (conveyor_pooler=transaction) LISTEN cannot run on "
            "%s: workers poll for new jobs every %.1fs instead of being notified. For "
            "instant wake-ups set %s (or ?%s= in the URL) to a direct PostgreSQL URL",
            self._errors.where(), self._config.poll_interval, LISTEN_ENV, LISTEN_OPTION)

    def subscribe(self, callback: WakeCallback) -> Callable[[], None]:
        """Subscribe; the first subscriber starts the LISTEN task on its own loop."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError("wake_subscribe needs a running event loop on Postgres") from None
        unsubscribe = self._hub.subscribe(callback)
        if self.polling:
            self._warn_polling()
            return unsubscribe
        with self._lock:
            self._listeners += 1
            if self._task is None or self._task.done():
                self._task = loop.create_task(self._listen(), name="conveyor-pg-listen")
        subscribed = True

        def cancel() -> None:
            nonlocal subscribed
            unsubscribe()
            with self._lock:
                if not subscribed:
                    return
                subscribed = False
                self._listeners -= 1
            self.stop(only_if_unused=True)

        return cancel

    def stop(self, only_if_unused: bool = False) -> asyncio.Task[None] | None:
        """Cancel the listener from any thread; it closes its own connection."""
        with self._lock:
            if only_if_unused and self._listeners:
                return None  # someone subscribed again meanwhile
            task, self._task = self._task, None
        if task is None or task.done() or task.get_loop().is_closed():
            return None
        task.get_loop().call_soon_threadsafe(task.cancel)
        return task

    async def _listen(self) -> None:
        """Keep one LISTEN connection alive. After every (re)connect wake everyone:
        notifications sent while no connection was listening are lost."""
        delay = _BACKOFF_MIN
        listen = sql.SQL("LISTEN {}").format(sql.Identifier(self._channel))
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self._url, **connect_kwargs(self._config)
                )
                async with conn:
                    await conn.execute(listen)
                    delay = _BACKOFF_MIN
                    self._wake("*")
                    while True:
                        async for note in conn.notifies(timeout=_LISTEN_PING):
                            self._wake(note.payload)
                        await conn.execute("SELECT 1")  # a silently dropped link shows here
            except psycopg.Error as exc:
                log.warning("LISTEN connection lost, retrying in %.1fs: %s",
                            delay, self._errors.unavailable(exc))
            except Exception:
                log.exception("LISTEN task failed, retrying in %.1fs", delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, _BACKOFF_MAX)

    def _wake(self, queue: str) -> None:
        """A failing subscriber must not stop wake-ups for everyone else."""
        try:
            self._hub.notify(queue)
        except Exception:
            log.exception("a wake-up callback failed")
