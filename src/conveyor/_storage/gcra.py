"""The generic cell rate algorithm behind ``RateLimit``: pure arithmetic on one key's
theoretical arrival time, so both backends decide a start the same way (each runs it
inside the transaction that holds the key's row lock)."""

from __future__ import annotations

from .control_types import RateRequest


def gcra(tat: float | None, now: float, request: RateRequest) -> tuple[int, float, float]:
    """How many of ``request.count`` may start now.

    Returns (granted, new theoretical arrival time, seconds until the next start).
    With burst 1, starts are spaced ``interval`` apart, so any window of the limit's
    period holds at most its count; a burst of b allows b - 1 more.
    """
    interval, tau = request.interval, (request.burst - 1) * request.interval
    t = max(tat if tat is not None else now, now)
    room = tau - (t - now)
    granted = 0 if room < -1e-9 else min(request.count, int((room + 1e-9) // interval) + 1)
    t += granted * interval
    wait = 0.0 if granted == request.count else max(t - tau - now, 0.0)
    return granted, t, wait
