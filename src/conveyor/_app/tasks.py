"""Registering tasks, argument types and periodic tasks on an app: what ``@app.task``,
``app.register_type`` and ``@app.periodic`` check and record (nothing is written to
storage until a job is enqueued or a worker syncs its schedules)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar, overload

from .. import _payload, _payload_crypt
from .._chunk import Chunk
from .._cron import Misfire, Schedule
from .._limits import KeyFunc, RateLimit, Unique
from .._routing import check_requires
from .._task import ChunkTaskDecorator, Task, TaskDecorator
from .._task_options import TaskOptions
from .._task_retry import (
    AnyBackoff,
    ExceptionSpec,
    backoff_takes_exception,
    check_exception_types,
)
from .jobs import JobsApp

P = ParamSpec("P")
R = TypeVar("R")


class TasksApp(JobsApp):
    """``@app.task``, ``app.register_type`` and ``@app.periodic``."""

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self, *, name: str | None = None, queue: str | None = None, priority: int = 0,
        max_attempts: int = 20, timeout: float | None = None,
        backoff: AnyBackoff | None = None, tags: Sequence[str] = (),
        unique: Unique | None = None, rate_limit: RateLimit | str | None = None,
        concurrency: int | None = None, concurrency_key: KeyFunc | None = None,
        retry_on: ExceptionSpec = (), discard_on: ExceptionSpec = (),
        encrypt: bool = False, requires: Mapping[str, str] | None = None,
        expires_in: float | None = None,
        fair_key: KeyFunc | None = None,
    ) -> TaskDecorator: ...

    @overload
    def task(
        self, *, chunk: Chunk, name: str | None = None, queue: str | None = None,
        priority: int = 0, max_attempts: int = 20, timeout: float | None = None,
        backoff: AnyBackoff | None = None, tags: Sequence[str] = (),
        unique: Unique | None = None, rate_limit: RateLimit | str | None = None,
        concurrency: int | None = None, concurrency_key: KeyFunc | None = None,
        retry_on: ExceptionSpec = (), discard_on: ExceptionSpec = (),
        encrypt: bool = False, requires: Mapping[str, str] | None = None,
        expires_in: float | None = None,
        fair_key: KeyFunc | None = None,
    ) -> ChunkTaskDecorator: ...

    def task(
        self, fn: Callable[..., Any] | None = None, *, name: str | None = None,
        queue: str | None = None, priority: int = 0, max_attempts: int = 20,
        timeout: float | None = None, backoff: AnyBackoff | None = None,
        tags: Sequence[str] = (), unique: Unique | None = None,
        rate_limit: RateLimit | str | None = None, concurrency: int | None = None,
        concurrency_key: KeyFunc | None = None, retry_on: ExceptionSpec = (),
        discard_on: ExceptionSpec = (), encrypt: bool = False, chunk: Chunk | None = None,
        requires: Mapping[str, str] | None = None,
        expires_in: float | None = None,
        fair_key: KeyFunc | None = None,
    ) -> Any:
        """Register a function as a task (``@app.task`` or ``@app.task(queue="mail")``).

        Without ``queue=``, the first of ``Conveyor(routes=...)``'s patterns that matches
        the task's name gives its queue, else ``"default"``.

        ``retry_on=(ConnectionError,)``: only these exception types retry, others
        discard the job at once; ``discard_on=(ValueError,)``: these discard at once.
        ``backoff=`` is seconds, ``callable(attempt)`` or ``callable(attempt, exc)``.
        ``encrypt=True`` seals its arguments at rest with ``CONVEYOR_ENCRYPTION_KEYS``
        (the ``conveyor[encryption]`` extra; docs/arguments.md).
        ``chunk=Chunk(size=100, wait=1.0)`` runs its jobs in chunks: the handler takes
        a list of ``ChunkJob`` and returns a list of results (docs/flow-control.md).
        ``requires={"gpu": "a100"}``: only workers started with these labels (``--label
        gpu=a100``) run its jobs (docs/flow-control.md).
        ``expires_in=60``: a job not started within 60 s of its enqueue never runs (it
        ends ``cancelled``, reason "expired"; docs/flow-control.md "Expiry").
        ``fair_key=lambda tenant_id, *_, **__: str(tenant_id)``: jobs take turns by key
        within their queue (docs/flow-control.md "Fair keys").
        """
        retry_types = check_exception_types("retry_on", retry_on)
        discard_types = check_exception_types("discard_on", discard_on)
        backoff_exc = backoff_takes_exception(backoff)
        required = check_requires(requires)
        expiry = _payload.check_expires_in(expires_in)

        def register(func: Callable[..., Any]) -> Task[Any, Any]:
            task_name = _payload.check_task_name(name or func.__name__)
            if task_name in self.tasks:
                raise ValueError(f"task {task_name!r} is already registered; pass name=")
            if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
                raise ValueError("timeout must be a positive number of seconds")
            limit = concurrency if concurrency is not None or concurrency_key is None else 1
            if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                      or limit < 1):
                raise ValueError("concurrency must be an int >= 1")
            if unique is not None and not isinstance(unique, Unique):
                raise TypeError("unique= takes a conveyor.Unique(...)")
            if not isinstance(encrypt, bool):
                raise TypeError(f"encrypt= takes True or False, got {encrypt!r}")
            if encrypt:
                _payload_crypt.require()
            options = TaskOptions(
                name=task_name, queue=self.router.queue_for(task_name) if queue is None
                else _payload.check_queue_name(queue),
                priority=_payload.check_priority(priority),
                max_attempts=_payload.check_max_attempts(max_attempts), timeout=timeout,
                backoff=backoff, tags=tuple(_payload.check_tags(tags)), unique=unique,
                rate_limit=RateLimit(rate_limit) if isinstance(rate_limit, str) else rate_limit,
                concurrency=limit, concurrency_key=concurrency_key,
                retry_on=retry_types, discard_on=discard_types,
                backoff_takes_exception=backoff_exc, encrypt=encrypt, chunk=chunk,
                requires=required,
                expires_in=expiry,
                fair_key=fair_key,
            )
            task = Task(self, func, options, self.codec)
            self.tasks[task_name] = task
            return task

        return register(fn) if fn is not None else register

    def register_type(
        self, cls: type[Any], encode: Callable[[Any], Any], decode: Callable[[Any], Any],
        *, tag: str | None = None,
    ) -> None:
        """Store values of ``cls`` in task arguments as ``{"__conveyor__": tag, "v":
        encode(value)}``; handlers get ``decode(v)`` back. ``encode`` must return
        JSON-able data (rich types included); ``tag`` defaults to the lowercased class
        name and must be the same in every process that enqueues or runs these jobs.

        Example: ``app.register_type(Money, lambda m: [str(m.amount), m.currency],
        lambda v: Money(Decimal(v[0]), v[1]), tag="money")``
        """
        self.codec.register(cls, encode, decode, tag)

    def periodic(
        self, *, cron: str, timezone: str = "UTC", misfire: Misfire = "run_once",
        backfill: int | None = None, name: str | None = None, args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None, **task_options: Any,
    ) -> Callable[[Callable[..., Any]], Task[Any, Any]]:
        """Register a task that runs at every tick of ``cron`` in ``timezone``.

        Example: ``@app.periodic(cron="*/5 * * * *", timezone="Europe/Paris")``
        """

        def register(fn: Callable[..., Any]) -> Task[Any, Any]:
            task: Task[Any, Any] = self.task(**task_options)(fn)
            schedule = Schedule(
                name=_payload.check_task_name(name or task.name), task=task.name, cron=cron,
                timezone=timezone, args=tuple(args), kwargs=dict(kwargs or {}),
                misfire="backfill" if backfill else misfire, backfill=backfill or 0,
            )
            task.check_arguments(schedule.args, schedule.kwargs)
            if schedule.name in self.schedules:
                raise ValueError(f"schedule {schedule.name!r} is already defined")
            self.schedules[schedule.name] = schedule
            return task

        return register
