"""Declarations of unique jobs, rate limits and concurrency limits on a task."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from ._job import ACTIVE_STATES, WAITING_STATES, JobState

_RATE = re.compile(r"\s*(\d+)\s*/\s*(\d*)\s*(s|sec|second|m|min|minute|h|hour|d|day)s?\s*")
_UNITS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60,
          "h": 3600, "hour": 3600, "d": 86400, "day": 86400}
DEFAULT_UNIQUE_STATES = tuple(s.value for s in ACTIVE_STATES)
#: The states a ``Unique(on_conflict="replace")`` job holds its key in: while it waits.
#: Once it has started, a new enqueue with its key goes in as a new job.
REPLACE_UNIQUE_STATES = tuple(s.value for s in WAITING_STATES)
#: What an enqueue does when a live job holds its unique key.
ON_CONFLICT = ("keep", "replace")

KeyFunc = Callable[..., Any]


def parse_rate(text: str) -> tuple[int, float]:
    """"100/m" -> (100, 60.0); also "10/s", "5/2s", "1000/hour"."""
    match = _RATE.fullmatch(text) if isinstance(text, str) else None
    if not match or int(match[1]) < 1:
        raise ValueError(f"invalid rate {text!r}: use COUNT/UNIT like '100/m', '10/s', '5/2s'")
    return int(match[1]), float(int(match[2] or 1) * _UNITS[match[3]])


@dataclasses.dataclass(frozen=True, slots=True)
class RateLimit:
    """A cluster-wide limit on how often a task's jobs start.

    With the default burst of 1 starts are spaced evenly, so no window of the period
    ever holds more than the count; ``burst=b`` lets b start back to back.

    ``key`` is called with the job's arguments bound to the task's parameters: each
    one by position (defaults filled in), keyword-only ones by name, however the caller
    passed them. Give it the task's parameters, or take the first and absorb the rest;
    one that cannot take that call is refused when the task is defined.

    Example: ``@app.task(rate_limit=RateLimit("10/s", key=lambda to, *_, **__: to.split("@")[1]))``
    """

    rate: str
    key: KeyFunc | None = None
    burst: int = 1

    def __post_init__(self) -> None:
        parse_rate(self.rate)
        if isinstance(self.burst, bool) or not isinstance(self.burst, int) or self.burst < 1:
            raise ValueError("burst must be an int >= 1")

    @property
    def interval(self) -> float:
        count, period = parse_rate(self.rate)
        return period / count

    def key_for(self, prefix: str, args: Sequence[Any], kwargs: dict[str, Any]) -> str:
        if self.key is None:
            return prefix
        return f"{prefix}:{self.key(*args, **kwargs)}"


@dataclasses.dataclass(frozen=True, slots=True)
class Unique:
    """At most one live job per key: a colliding enqueue returns the existing job.

    ``key`` is a string or a function of the job's arguments (default: task + all
    arguments); ``period`` (seconds) scopes the key to a time bucket; ``states`` are
    the states in which a job holds its key. ``on_conflict="replace"`` (debounce):
    while the holder still waits (scheduled, available, retryable) a new enqueue
    replaces its arguments and run time and returns it; once it has started, the new
    one goes in as a new job (the key is held only while waiting).

    Example: ``@app.task(unique=Unique(key=lambda user_id: str(user_id), period=3600))``
    """

    key: str | KeyFunc | None = None
    period: float | None = None
    states: tuple[str, ...] = DEFAULT_UNIQUE_STATES
    on_conflict: str = "keep"

    def __post_init__(self) -> None:
        if not isinstance(self.states, tuple | list) or not all(
                isinstance(s, str) for s in self.states):
            raise TypeError(f"Unique.states must be a tuple of state names, got {self.states!r}")
        for state in self.states:
            JobState(state)  # raises ValueError on an unknown state
        if not self.states:
            raise ValueError("Unique.states must name at least one state")
        if not isinstance(self.on_conflict, str) or self.on_conflict not in ON_CONFLICT:
            raise ValueError(f"Unique.on_conflict must be 'keep' or 'replace', got "
                             f"{self.on_conflict!r}")
        if self.on_conflict == "replace":
            self._replace_states()
        if self.period is not None and (not isinstance(self.period, int | float) or self.period <= 0):
            raise ValueError("Unique.period must be a positive number of seconds")

    def _replace_states(self) -> None:
        """A replacing key is held while its job waits, never once it has started."""
        if tuple(self.states) == DEFAULT_UNIQUE_STATES:
            object.__setattr__(self, "states", REPLACE_UNIQUE_STATES)
        elif not set(self.states) <= set(REPLACE_UNIQUE_STATES):
            raise ValueError(
                "Unique(on_conflict='replace') holds its key only while the job waits: "
                f"states must be among {', '.join(REPLACE_UNIQUE_STATES)}, got "
                f"{', '.join(self.states)}")
        object.__setattr__(self, "states", tuple(self.states))

    @property
    def replaces(self) -> bool:
        return self.on_conflict == "replace"

    def full_key(self, task: str, override: str | None, args: Sequence[Any],
                 kwargs: dict[str, Any], args_json: str, kwargs_json: str,
                 now: float | None = None) -> str:
        if override is not None:
            base = override
        elif isinstance(self.key, str):
            base = self.key
        elif self.key is not None:
            base = str(self.key(*args, **kwargs))
        else:
            base = hashlib.sha256(f"{args_json}|{kwargs_json}".encode()).hexdigest()[:32]
        key = f"{task}:{base}"
        if self.period is not None:
            key += f":{int((time.time() if now is None else now) // self.period)}"
        if len(key) > 500:
            raise ValueError(f"unique key of task {task!r} is over 500 characters")
        return key

    @property
    def states_text(self) -> str:
        return "," + ",".join(self.states) + ","


# -- key functions against their task's signature ---------------------------------------


def key_arguments(signature: inspect.Signature, args: Sequence[Any],
                  kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A job's arguments as its key functions are called with them: bound to the task's
    signature, every parameter that can be positional by position, defaults filled in,
    so ``key=lambda user, *_: user`` sees the same call whether the caller wrote
    ``enqueue("ada", 5)`` or ``enqueue(user="ada", seconds=5)``. Arguments that do not
    bind (an encrypted task's sealed marker) are passed as they are."""
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return tuple(args), dict(kwargs)
    bound.apply_defaults()
    return bound.args, bound.kwargs


def check_key_function(what: str, key: object, task: str, signature: inspect.Signature) -> None:
    """Refuse, when the task is defined, a key function (``RateLimit(key=)``,
    ``Unique(key=)``, ``concurrency_key=``) that cannot take the call ``key_arguments``
    makes: one that fails there would only be found job by job (a rate limit then fell
    back to the task-wide key with a log line)."""
    if key is None or isinstance(key, str):
        return
    if not callable(key):
        raise TypeError(f"{what} of task {task!r} must be a function, got {key!r}")
    try:
        accepts = inspect.signature(key)
    except (TypeError, ValueError):  # a builtin that does not describe itself
        return
    args, kwargs = _call(signature)
    try:
        accepts.bind(*args, **kwargs)
    except TypeError as exc:
        call = ", ".join([*args, *(f"{k}=..." for k in kwargs)])
        raise TypeError(
            f"{what} {accepts} cannot take the call of task {task!r}{signature}: "
            f"key({call}) fails ({exc}). Give it the task's parameters, or take the "
            "first and absorb the rest, e.g. key=lambda to, *_, **__: to"
        ) from None


def _call(signature: inspect.Signature) -> tuple[list[str], dict[str, str]]:
    """The shape of ``key_arguments``' call for a function with ``signature``, for
    ``bind``: every positional parameter (and one more for ``*args``), every keyword-only
    one by name (and one more for ``**kwargs``); the values are the parameters' names."""
    P = inspect.Parameter
    params = list(signature.parameters.values())
    args = [p.name for p in params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    args += ["*args"] if any(p.kind is P.VAR_POSITIONAL for p in params) else []
    kwargs = {p.name: p.name for p in params if p.kind is P.KEYWORD_ONLY}
    if any(p.kind is P.VAR_KEYWORD for p in params):
        kwargs["more_kwargs"] = "**kwargs"
    return args, kwargs
