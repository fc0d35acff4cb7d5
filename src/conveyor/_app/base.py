"""The base of the app: its definitions (tasks, schedules, hooks), its storage per event
loop, and the one bridge from the sync API to the async core."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import threading
from collections.abc import Callable, Coroutine, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from .._clock import VirtualClock
from .._config import ConveyorConfig, check_version, url_from_env
from .._hooks import Middleware, StateListener
from .._observed import ObservedStorage
from .._payload_types import TypeCodec
from .._portal import Portal
from .._registry import AppRegistry
from .._routing import Router
from .._storage import Migration, Storage, WakeHub, create_storage
from .permits import release_held

if TYPE_CHECKING:
    from .limiters import Limiter

T = TypeVar("T")
#: Who asked for a change, as a state-change event names it.
SOURCE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


class AppBase:
    """Definitions, storage and the sync bridge; see ``Conveyor``."""

    def __init__(self, url: str | None = None, *, config: ConveyorConfig | None = None,
                 clock: VirtualClock | None = None, version: str | None = None,
                 routes: Mapping[str, str] | None = None) -> None:
        self.url = url if url is not None else url_from_env()
        #: Task-name patterns to queues, for tasks registered without ``queue=``.
        self.router = Router(routes)
        config = config or ConveyorConfig()
        if version is not None:  # the app's version, recorded with every worker node
            config = dataclasses.replace(config, version=check_version(version))
        self.registry = AppRegistry(config)
        self.config = self.registry.config
        self.tasks = self.registry.tasks
        self.schedules = self.registry.schedules
        self.hooks = self.registry.hooks
        #: Argument types beyond JSON that this app stores (``register_type``).
        self.codec = TypeCodec()
        #: ``app.limiter``'s limiters by name (``_app/limiters.py``).
        self.limiters: dict[str, Limiter] = {}
        self._hub = WakeHub()
        self._portal = Portal(self.close_async)
        #: Put around every storage this app opens (``wrap_storage``).
        self._wrap: Callable[[Storage], Storage] = lambda storage: storage
        self._bind(self.url, clock)

    def _bind(self, url: str, clock: VirtualClock | None) -> None:
        """Use this database and clock from now on (at start, and in ``rebind``)."""
        if clock is not None and not isinstance(clock, VirtualClock):
            raise TypeError(f"clock= takes a conveyor.testing.VirtualClock, got {clock!r}")
        # Fail on a malformed URL now, not at the first enqueue.
        self._offline = create_storage(url, self._hub, self.config.pool_max_size,
                                       virtual_clock=clock is not None)
        self.url = url
        #: The testing toolkit's virtual clock, or None: the database's own clock.
        self.clock = clock
        self._storages: dict[asyncio.AbstractEventLoop, ObservedStorage] = {}
        self._opening: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}
        self._pipelines: dict[asyncio.AbstractEventLoop, Any] = {}  # jobs.py: enqueue_async
        self._detach: Callable[[], None] = (
            clock.attach(self._clock_write, self._clock_write_async) if clock else lambda: None)

    def __repr__(self) -> str:
        return f"<Conveyor {self.dialect} tasks={len(self.tasks)}>"

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgres"``, known from the URL (no connection)."""
        return self._offline.capabilities.dialect

    # -- storage ------------------------------------------------------------------------------

    async def storage(self) -> Storage:
        """The open storage of the running event loop (one per loop, opened on first
        use; concurrent first callers wait for the one opening). It is an
        ``ObservedStorage``: writes through it emit state changes attributed to "api"."""
        return await self._observed()

    async def storage_for(self, source: str) -> Storage:
        """The same storage, its writes attributed to ``source`` (e.g. "dashboard"): a
        short name (letters, digits, ``_.:-``), as every operator action takes it."""
        return (await self._observed()).with_source(check_source(source))

    def wrap_storage(self, wrapper: Callable[[Storage], Storage]) -> None:
        """Put every storage this app opens from now on (one per event loop) inside
        ``wrapper(storage)``, a proxy with the same methods: how ``conveyor bench``
        counts database round trips, whatever path (sync, async, worker) makes them.
        Storages already open keep what they had."""
        self._wrap = wrapper

    async def _observed(self) -> ObservedStorage:
        loop = asyncio.get_running_loop()
        storage = self._storages.get(loop)
        if storage is not None:
            return storage
        lock = self._opening.setdefault(loop, asyncio.Lock())
        async with lock:
            storage = self._storages.get(loop)
            if storage is None:
                for old in [lp for lp in self._opening if lp.is_closed()]:
                    self._storages.pop(old, None)
                    self._opening.pop(old, None)
                inner = create_storage(self.url, self._hub, self.config.pool_max_size,
                                       virtual_clock=self.clock is not None)
                await inner.open()  # published only once open
                if self.clock is not None:
                    self.clock.adopt(await inner.clock_join(self.clock.offset))
                storage = self._storages[loop] = ObservedStorage(self._wrap(inner), self.hooks)
        return storage

    async def close_async(self) -> None:
        """Close this loop's connections. Example: ``await app.close_async()``"""
        loop = asyncio.get_running_loop()
        storage = self._storages.pop(loop, None)
        self._opening.pop(loop, None)
        if storage is not None:
            await release_held(storage)  # slots still held through it (app.limiter)
            await storage.inner.close()

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        """The one bridge from the sync API to the async core."""
        return self._portal.call(coro)

    def close(self) -> None:
        """Close the sync API's connections and its background loop (also done at exit)."""
        self._portal.stop()

    # -- the testing toolkit: another database and a virtual clock -------------------------

    def _clock_write(self, offset: float) -> None:
        self._sync(self._clock_write_async(offset))

    async def _clock_write_async(self, offset: float) -> None:
        assert self.clock is not None
        self.clock.adopt(await (await self._observed()).clock_set(offset))

    @contextlib.contextmanager
    def rebind(self, url: str, *, clock: VirtualClock | None = None) -> Iterator[None]:
        """Use another database (and a virtual clock) inside the block, then come back.

        An app defined at import time has its tasks bound to it; the testing toolkit
        points that same app at a fresh database per test. Connections opened inside
        the block are closed at its end.

        Example: ``with app.rebind("sqlite:////tmp/t.db", clock=VirtualClock()): ...``
        """
        saved = (self.url, self.clock, self._offline, self._storages, self._opening,
                 self._detach)
        self._close_all()
        self._bind(url, clock)
        try:
            yield
        finally:
            self._close_all()
            self._detach()
            (self.url, self.clock, self._offline, self._storages, self._opening,
             self._detach) = saved

    def _close_all(self) -> None:
        """Close the storages of every loop: the sync API's on its loop, those of loops
        that ended (``asyncio.run``) on a loop of their own."""
        portal = self._portal.loop
        for loop, storage in list(self._storages.items()):
            if loop is portal:
                self._sync(self.close_async())
            elif loop.is_closed():
                _close_elsewhere(storage)
            self._storages.pop(loop, None)
            self._opening.pop(loop, None)

    async def migrate_async(self, *, dry_run: bool = False) -> list[Migration]:
        """Apply pending schema migrations (Postgres needs this once per version)."""
        return await self._with_admin_storage(lambda s: s.migrate(dry_run=dry_run))

    async def pending_migrations_async(self) -> list[Migration]:
        """Migrations the database has not applied yet; applies nothing."""
        return await self._with_admin_storage(lambda s: s.schema_pending())

    async def _with_admin_storage(
        self, call: Callable[[Storage], Coroutine[Any, Any, list[Migration]]]
    ) -> list[Migration]:
        storage = create_storage(self.url, self._hub, 2)
        await storage.open(check_schema=False)
        try:
            return await call(storage)
        finally:
            await storage.close()

    # -- hooks ----------------------------------------------------------------------------------

    def add_middleware(self, middleware: Middleware) -> Middleware:
        """Wrap every job execution in ``middleware``; usable as a decorator.

        Example::

            @app.add_middleware
            async def traced(job: JobContext, call_next):
                with tracer.start_as_current_span(job.task):
                    return await call_next()
        """
        return self.hooks.add_middleware(middleware)

    def on_state_change(self, listener: StateListener) -> StateListener:
        """Call ``listener(change)`` after every persisted transition of a job: enqueue,
        claim, each outcome, and retries, cancels and discards by the API or dashboard.

        Example: ``app.on_state_change(lambda c: print(c.job_id, c.state))``
        """
        return self.hooks.add_listener(listener)


def check_source(source: object) -> str:
    """An event source as the actions take it: who asked, named in every state change
    (``"api"``, ``"cli"``, ``"dashboard"``, ``"django"``, or the caller's own)."""
    if not isinstance(source, str) or not SOURCE.fullmatch(source):
        raise ValueError(f"source must be 1 to 64 letters, digits or _.:- , got {source!r}")
    return source


def _close_elsewhere(storage: ObservedStorage) -> None:
    """Close a storage whose loop has ended, on a loop of its own (best effort: a
    connection pool bound to the dead loop may refuse; its connections then go with
    the process)."""
    def run() -> None:
        with contextlib.suppress(Exception):
            asyncio.run(storage.inner.close())

    thread = threading.Thread(target=run, name="conveyor-close")
    thread.start()
    thread.join(10)
