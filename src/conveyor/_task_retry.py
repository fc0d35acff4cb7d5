"""Retry policies: which failures retry, which discard at once, and how long to wait.

A task may say ``retry_on=(...)`` (only these exception types retry; any other
failure discards the job at once) and ``discard_on=(...)`` (these discard at once;
``discard_on`` wins when a type is in both). Its ``backoff`` may be seconds, a
``callable(attempt)`` or a ``callable(attempt, exc)`` that looks at the failure.

A queue may carry a default backoff, set live by operators
(``app.set_queue_backoff("mail", "exp:5:3600")``), for the tasks that set none. The
order is: the task's own ``backoff``, else the queue's default, else the built-in
exponential backoff.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import random
from collections.abc import Callable, Iterable
from typing import Any

#: attempt number (1-based) -> seconds until the next attempt
Backoff = Callable[[int], float]
#: attempt number (1-based), the exception the attempt raised -> seconds
ExceptionBackoff = Callable[[int, BaseException], float]
AnyBackoff = Backoff | ExceptionBackoff | float
ExceptionTypes = tuple[type[BaseException], ...]
#: What ``retry_on=``/``discard_on=`` accept: one exception class or several.
ExceptionSpec = type[BaseException] | Iterable[type[BaseException]]

#: Longest fixed or capped queue backoff: the longest delay a job may have (one year).
MAX_SECONDS = 365 * 86_400.0


def check_exception_types(option: str, value: Any) -> ExceptionTypes:
    """``retry_on=``/``discard_on=`` as a tuple of exception classes; one class alone is
    accepted too. Anything else is refused when the task is defined, not at its first
    failure."""
    if value is None:
        return ()
    items = (value,) if isinstance(value, type) else value
    if isinstance(items, str | bytes) or not isinstance(items, Iterable):
        raise TypeError(f"{option}= takes exception classes, e.g. (ConnectionError, "
                        f"TimeoutError); got {value!r}")
    out: list[type[BaseException]] = []
    for item in items:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise TypeError(f"{option}= takes exception classes, e.g. (ConnectionError, "
                            f"TimeoutError); got {item!r} ({type(item).__name__})")
        out.append(item)
    return tuple(out)


def backoff_takes_exception(backoff: Any) -> bool:
    """Check a task's ``backoff=`` and say whether it is ``callable(attempt, exc)``.

    Seconds (a number >= 0), ``callable(attempt)`` and ``callable(attempt, exc)`` are
    accepted; the callable's arity is read once, here, not per failure.
    """
    if backoff is None:
        return False
    if callable(backoff):
        try:
            params = inspect.signature(backoff).parameters.values()
        except (TypeError, ValueError):  # a builtin without a signature: called with attempt
            return False
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        required = [p for p in positional if p.default is p.empty]
        varargs = any(p.kind is p.VAR_POSITIONAL for p in params)
        if len(required) > 2 or (not positional and not varargs):
            raise TypeError("backoff= takes seconds, a callable(attempt) or a "
                            "callable(attempt, exc)")
        return len(positional) >= 2 or varargs
    if isinstance(backoff, bool) or not isinstance(backoff, int | float) or not backoff >= 0:
        raise ValueError(f"backoff= must be seconds >= 0 or a callable, got {backoff!r}")
    return False


def discard_reason(retry_on: ExceptionTypes, discard_on: ExceptionTypes,
                   exc: BaseException | None) -> str | None:
    """Why this failure ends the job at once, or None when it may retry."""
    if exc is None:
        return None
    name = type(exc).__name__
    for kind in discard_on:
        if isinstance(exc, kind):
            return f"discard_on matched {name}" + ("" if kind is type(exc)
                                                    else f" (as {kind.__name__})")
    if retry_on and not isinstance(exc, retry_on):
        names = ", ".join(k.__name__ for k in retry_on)
        return f"{name} is not in retry_on ({names})"
    return None


def task_delay(backoff: Any, takes_exception: bool, attempt: int,
               exc: BaseException | None) -> float | None:
    """The task's own backoff for this failure, or None when the task sets none."""
    if backoff is None:
        return None
    if callable(backoff):
        if takes_exception:
            return float(backoff(attempt, exc if exc is not None else Exception("unknown")))
        return float(backoff(attempt))
    return float(backoff)


@dataclasses.dataclass(frozen=True, slots=True)
class QueueBackoff:
    """A queue's default backoff, stored as text: ``"30"`` waits 30 s after every
    failure; ``"exp:5:3600"`` waits 5 s, 10 s, 20 s ... up to 3600 s (±10% jitter)."""

    base: float
    cap: float | None = None  # None: fixed

    @property
    def spec(self) -> str:
        if self.cap is None:
            return _num(self.base)
        return f"exp:{_num(self.base)}:{_num(self.cap)}"

    def delay(self, attempt: int) -> float:
        if self.cap is None:
            return self.base
        grown = self.base * 2.0 ** min(max(attempt - 1, 0), 60)
        return min(grown, self.cap) * random.uniform(0.9, 1.1)


def _num(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


def parse_queue_backoff(spec: Any) -> QueueBackoff:
    """``"30"``, ``30``, ``"exp:5"`` (cap one day) or ``"exp:5:3600"``; a clear error
    for anything else."""
    hint = ("a queue backoff is seconds (e.g. 30) or exp:BASE[:CAP] (e.g. exp:5:3600), "
            f"got {spec!r}")
    if isinstance(spec, bool):
        raise ValueError(hint)
    if isinstance(spec, int | float):
        spec = repr(float(spec))
    if not isinstance(spec, str):
        raise ValueError(hint)
    parts = spec.strip().split(":")
    try:
        if len(parts) == 1:
            numbers = [float(parts[0])]
        elif parts[0].strip().lower() == "exp" and len(parts) in (2, 3):
            numbers = [float(p) for p in parts[1:]] + ([86_400.0] if len(parts) == 2 else [])
        else:
            raise ValueError(hint)
    except ValueError:
        raise ValueError(hint) from None
    if not all(math.isfinite(n) and 0 <= n <= MAX_SECONDS for n in numbers):
        raise ValueError(f"{hint}: seconds must be between 0 and {MAX_SECONDS:.0f}")
    if len(numbers) == 1:
        return QueueBackoff(numbers[0])
    if numbers[0] <= 0 or numbers[1] < numbers[0]:
        raise ValueError(f"{hint}: BASE must be > 0 and CAP >= BASE")
    return QueueBackoff(numbers[0], numbers[1])
