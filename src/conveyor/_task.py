"""Tasks: plain functions registered on an app, enqueued with their own signature."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

from . import _payload, _payload_crypt
from ._chunk import check_chunk_handler
from ._dependencies import FailurePolicy, check_policy, dependency_ids
from ._errors import PayloadTooLargeError
from ._job import Job
from ._limits import Unique, check_key_function, key_arguments
from ._payload_hints import CallPlan
from ._payload_types import DEFAULT_CODEC, TypeCodec
from ._routing import check_requires, requires_json
from ._storage import JobInsert, fast_constructor, make_insert
from ._task_options import EnqueueOptions, TaskOptions, check_expiry

P = ParamSpec("P")
R = TypeVar("R")

#: attempt number (1-based) -> seconds until the next attempt (a backoff may also be
#: ``callable(attempt, exc)``: see ``conveyor._task_retry``)
Backoff = Callable[[int], float]


class Enqueuer(Protocol):
    """What a task enqueues through (the app): the task knows nothing else of it."""

    def enqueue_many(self, specs: Sequence[JobSpec], *, connection: Any = None) -> list[Job]: ...

    async def enqueue_many_async(
        self, specs: Sequence[JobSpec], *, connection: Any = None
    ) -> list[Job]: ...


@dataclasses.dataclass(frozen=True, slots=True)
class JobSpec:
    """A job ready to enqueue, built by ``task.job(...)`` for ``app.enqueue_many``.

    Example: ``app.enqueue_many([send_email.job("a@b.c", subject="x")])``
    """

    task: Task[Any, Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    options: EnqueueOptions

    def to_insert(self, max_payload_bytes: int, now: float | None = None) -> JobInsert:
        """Validate and encode; raises before anything is written. ``now`` (unix time)
        is the app's virtual clock, when it has one (a unique key's time bucket)."""
        opts, defaults = self.options, self.task.defaults
        name = defaults.name
        args_json, kwargs_json = _payload.encode_arguments(
            name, self.args, self.kwargs, max_payload_bytes, self.task.codec, self.task.positional
        )
        plain_args = args_json, kwargs_json
        if defaults.encrypt:
            args_json, kwargs_json = self._sealed(args_json, kwargs_json, max_payload_bytes)
        tags_json, meta_json = _payload.encode_tags_and_meta(
            name, list(defaults.tags) + _payload.check_tags(opts.tags or []),
            {} if opts.meta is None else opts.meta, max_payload_bytes)
        unique_key = unique_states = None
        replace = False
        if defaults.unique is not None or opts.unique_key is not None:
            unique = defaults.unique or Unique()
            if opts.unique_key is not None and not isinstance(opts.unique_key, str):
                raise TypeError("unique_key must be a string")
            if defaults.encrypt:  # a plain hash of secret arguments could be guessed
                plain_args = _payload_crypt.unique_digest(*plain_args), ""
            unique_key = unique.full_key(name, opts.unique_key,
                                         *self.task.key_arguments(self.args, self.kwargs),
                                         *plain_args, now)
            unique_states = unique.states_text
            replace = unique.replaces
        # The task's own defaults were checked when it was registered (this runs per job).
        return make_insert(
            task=name,
            queue=defaults.queue if opts.queue is None else _payload.check_queue_name(opts.queue),
            args_json=args_json,
            kwargs_json=kwargs_json,
            priority=defaults.priority if opts.priority is None
            else _payload.check_priority(opts.priority),
            max_attempts=defaults.max_attempts if opts.max_attempts is None
            else _payload.check_max_attempts(opts.max_attempts),
            tags_json=tags_json,
            meta_json=meta_json,
            delay=_payload.check_delay(opts.delay),
            run_at=_payload.check_run_at(opts.run_at),
            unique_key=unique_key,
            unique_states=unique_states,
            concurrency_key=self.concurrency_key(),
            requires_json=requires_json(self.requires()),
            expires_in=defaults.expires_in if opts.expires_at is None and opts.expires_in is None
            else opts.expires_in,
            expires_at=opts.expires_at,
            unique_replace=replace,
            fair_key=self.fair_key(),
        )

    def requires(self) -> Mapping[str, str] | None:
        """The labels this job requires: its own options', else its task's."""
        own = self.options.requires
        return self.task.defaults.requires if own is None else (own or None)

    def _shares_template(self) -> bool:
        """Only the arguments tell this job from another of its task and options: no
        unique key, no sealing, no concurrency key computed from the arguments."""
        defaults = self.task.defaults
        return (defaults.unique is None and self.options.unique_key is None
                and not defaults.encrypt and defaults.fair_key is None
                and (defaults.concurrency is None or defaults.concurrency_key is None))

    def _sealed(self, args_json: str, kwargs_json: str, max_bytes: int) -> tuple[str, str]:
        args_json, kwargs_json = _payload_crypt.seal(self.task.name, args_json, kwargs_json)
        if len(args_json) > max_bytes:
            raise PayloadTooLargeError(
                f"encrypted arguments of task {self.task.name!r} are {len(args_json)} bytes, "
                f"over the cap of {max_bytes} bytes (ConveyorConfig.max_payload_bytes)")
        return args_json, kwargs_json

    def fair_key(self) -> str | None:
        """The key this job takes turns under: the enqueue's, else the task's function's."""
        if self.options.fair_key is not None:
            return self.options.fair_key  # checked by options()
        key = self.task.defaults.fair_key
        if key is None:
            return None
        args, kwargs = self.task.key_arguments(self.args, self.kwargs)
        return _payload.check_fair_key(
            key(*args, **kwargs), f"fair_key= of task {self.task.name!r} returned a key that")

    def concurrency_key(self) -> str | None:
        """The key whose running jobs count against the task's concurrency limit."""
        defaults = self.task.defaults
        if defaults.concurrency is None:
            return None
        if defaults.concurrency_key is None:
            return defaults.name
        args, kwargs = self.task.key_arguments(self.args, self.kwargs)
        return f"{defaults.name}:{defaults.concurrency_key(*args, **kwargs)}"


#: ``JobSpec(...)`` at a fraction of the frozen dataclass's cost (one per ``task.job``).
_make_spec: Callable[..., JobSpec] = fast_constructor(JobSpec)


class _Enqueuer(Generic[P]):
    """The enqueue methods shared by a task and a task with options applied."""

    _task: Task[Any, Any]
    _opts: EnqueueOptions

    def job(self, *args: P.args, **kwargs: P.kwargs) -> JobSpec:
        """Build a job for ``app.enqueue_many`` without writing it."""
        self._task.check_arguments(args, kwargs)
        return _make_spec(self._task, args, kwargs, self._opts)  # ** made it a new dict

    def _split_connection(self, kwargs: dict[str, Any]) -> EnqueueOptions:
        if "connection" in kwargs and not self._task.accepts("connection"):
            return dataclasses.replace(self._opts, connection=kwargs.pop("connection"))
        return self._opts

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Write one job and return it. Example: ``send_email.enqueue("a@b.c", subject="hi")``"""
        opts = self._split_connection(kwargs)
        spec = JobSpec(self._task, args, kwargs, opts)
        self._task.check_arguments(args, kwargs)
        return self._task.enqueuer.enqueue_many([spec], connection=opts.connection)[0]

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Async twin of ``enqueue``. Example: ``await send_email.enqueue_async("a@b.c")``"""
        opts = self._split_connection(kwargs)
        spec = _make_spec(self._task, args, kwargs, opts)
        self._task.check_arguments(args, kwargs)
        jobs = await self._task.enqueuer.enqueue_many_async([spec], connection=opts.connection)
        return jobs[0]


class TaskWithOptions(_Enqueuer[P]):
    """A task with per-enqueue options applied; made by ``task.options(...)``."""

    def __init__(self, task: Task[Any, Any], opts: EnqueueOptions) -> None:
        self._task, self._opts = task, opts

    def bare_job(self) -> JobSpec:
        """A job with no arguments yet, unchecked: a chord's callback, whose
        ``results`` argument is given when its group finishes."""
        return JobSpec(self._task, (), {}, self._opts)


class Task(_Enqueuer[P], Generic[P, R]):
    """A function registered with ``@app.task``; calling it runs it directly.

    Example: ``send_email.options(delay=30, queue="mail").enqueue("a@b.c", subject="hi")``
    """

    def __init__(self, enqueuer: Enqueuer, fn: Callable[P, R], defaults: TaskOptions,
                 codec: TypeCodec = DEFAULT_CODEC) -> None:
        self.enqueuer = enqueuer
        self.fn = fn
        self.defaults = defaults
        self.codec = codec
        self.is_async = inspect.iscoroutinefunction(fn)
        self.signature = inspect.signature(fn)
        #: The function whose parameters a job's arguments are converted to.
        self._shape: Callable[..., Any] = fn
        if defaults.chunk is not None:  # each job's arguments are free: the list is fn's
            check_chunk_handler(defaults.name, fn, defaults.chunk)
            self.signature = inspect.signature(_any_arguments)
            self._shape = _any_arguments
        #: Positional parameters' names, to name an argument that cannot be stored.
        self.positional = tuple(p.name for p in self.signature.parameters.values()
                                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
        self._check_key_functions()
        self._plan: CallPlan | None = None
        #: Argument shapes (positional count, keyword names) known to fit the signature.
        self._fits: set[tuple[int, tuple[str, ...]]] = set()
        self._task, self._opts = self, EnqueueOptions()
        #: (max_payload_bytes, insert) of a job of the task's own options, for
        #: ``_task_inserts._single_insert``.
        self._template: tuple[int, JobInsert] | None = None

    def _check_key_functions(self) -> None:
        """Each key function takes every call this task takes (refused now, not job by
        job). A rate limit's key of an encrypted task is called on the sealed marker."""
        opts = self.defaults
        if opts.rate_limit is not None and not opts.encrypt:
            check_key_function("RateLimit(key=...)", opts.rate_limit.key, self.name,
                               self.signature)
        if opts.unique is not None:
            check_key_function("Unique(key=...)", opts.unique.key, self.name, self.signature)
        check_key_function("concurrency_key=", opts.concurrency_key, self.name, self.signature)
        check_key_function("fair_key=", opts.fair_key, self.name, self.signature)

    @property
    def name(self) -> str:
        return self.defaults.name

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.defaults.queue}>"

    def key_arguments(self, args: Sequence[Any],
                      kwargs: Mapping[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """A job's arguments as this task's key functions take them (``key_arguments``)."""
        return key_arguments(self.signature, args, dict(kwargs))

    def accepts(self, parameter: str) -> bool:
        return parameter in self.signature.parameters

    def check_arguments(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """Refuse at enqueue what the function could never be called with. Binding
        only depends on the number of positional arguments and the keywords' names,
        so a shape that fits is remembered (this runs for every job)."""
        shape = (len(args), tuple(kwargs))
        if shape in self._fits:
            return
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"arguments do not fit task {self.name!r}{self.signature}: {exc}") from None
        if len(self._fits) < 256:
            self._fits.add(shape)

    def call_arguments(
        self, args: list[Any], kwargs: dict[str, Any]
    ) -> tuple[list[Any], dict[str, Any]]:
        """The stored arguments as the handler takes them: decrypted when sealed, tags
        read back, values converted to the parameters' annotations. Raises
        ``ArgumentsError``. The annotations are read on first use, not at registration,
        so that they may name classes defined after the task."""
        if args and type(args[0]) is dict and _payload_crypt.sealed_key(args, kwargs):
            args, kwargs = _payload_crypt.unseal(self.name, args[0])
        plan = self._plan
        if plan is None:
            plan = self._plan = CallPlan(self.name, self._shape, self.codec)
        return plan.apply(args, kwargs)

    def options(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        delay: float | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        tags: Sequence[str] | None = None,
        meta: Mapping[str, Any] | None = None,
        connection: Any = None,
        unique_key: str | None = None,
        depends_on: Sequence[Job | int] = (),
        on_failure: FailurePolicy = "cancel",
        requires: Mapping[str, str] | None = None,
        expires_in: float | None = None,
        expires_at: datetime | None = None,
        fair_key: str | None = None,
    ) -> TaskWithOptions[P]:
        """Override defaults for one enqueue. Example: ``task.options(delay=30).enqueue()``

        ``tags`` add to the task's own, within the limits docs/arguments.md gives ("Tags
        and meta": ``MAX_TAGS``, ``MAX_TAG_CHARS``, with meta ``max_payload_bytes``).
        ``depends_on=[job_a, job_b]`` (jobs or ids): the job waits in state ``pending``
        until they are final; ``on_failure`` says what it does if one fails
        (``"cancel"``, ``"run"``, ``"run_with_failure"``; docs/workflows.md).
        ``requires={"gpu": "a100"}``: only a worker started with these labels runs it
        (instead of the task's own requirement; ``{}``: any worker).
        ``expires_in=60`` (seconds) or ``expires_at=`` (an aware datetime): a job not
        started by then never runs, it ends ``cancelled`` with the reason "expired".
        ``fair_key="acme"``: the job takes turns with other keys' jobs of its queue
        (docs/flow-control.md "Fair keys")."""
        if delay is not None and run_at is not None:
            raise ValueError("give delay= or run_at=, not both")
        if queue is not None:  # refused here, not at the enqueue that follows
            _payload.check_queue_name(queue)
        _payload.check_delay(delay)
        _payload.check_run_at(run_at)
        if expires_in is not None or expires_at is not None:
            expires_in, expires_at = check_expiry(delay, run_at, expires_in, expires_at)
        elif self.defaults.expires_in is not None and delay is not None:
            check_expiry(delay, None, self.defaults.expires_in, None)
        if fair_key is not None:
            _payload.check_fair_key(fair_key)
        opts = EnqueueOptions(
            queue, priority, delay, run_at, max_attempts, tags, meta, connection, unique_key,
            dependency_ids(depends_on) if depends_on != () else (), check_policy(on_failure),
            None if requires is None else (check_requires(requires) or {}),
            expires_in, expires_at,
            fair_key,
        )
        return TaskWithOptions(self, opts)


def _any_arguments(*args: Any, **kwargs: Any) -> None:
    """The signature of one job of a chunk task: any JSON arguments (the handler
    takes the list of them)."""


class TaskDecorator(Protocol):
    """What ``@app.task(...)`` with options returns: it keeps the function's signature."""

    def __call__(self, fn: Callable[P, R], /) -> Task[P, R]: ...


class ChunkTaskDecorator(Protocol):
    """What ``@app.task(chunk=Chunk(...))`` returns: the handler takes the list of jobs,
    while each job is enqueued with any JSON arguments of its own."""

    def __call__(self, fn: Callable[..., Any], /) -> Task[..., Any]: ...
