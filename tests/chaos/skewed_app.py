"""The chaos app in a process whose wall clock is off by ``$CONVEYOR_CHAOS_SKEW`` seconds.

Import it as the worker's APP (``tests.chaos.skewed_app:app``): before the tasks are
loaded it shifts ``time.time``/``time.time_ns`` and ``datetime.now``/``utcnow`` as seen
by every Conveyor module, as if this machine's clock were wrong. The monotonic clock
(asyncio's timers, the ledger) is left alone: it has no notion of the time of day.
"""

from __future__ import annotations

import datetime as _dt
import os
import sys
import time
from typing import Any

SKEW = float(os.environ.get("CONVEYOR_CHAOS_SKEW", "0"))

_real_time, _real_time_ns = time.time, time.time_ns


def _time() -> float:
    return _real_time() + SKEW


def _time_ns() -> int:
    return _real_time_ns() + int(SKEW * 1e9)


class SkewedDatetime(_dt.datetime):
    """``datetime`` whose ``now`` and ``utcnow`` are off by SKEW."""

    @classmethod
    def now(cls, tz: _dt.tzinfo | None = None) -> Any:
        return _dt.datetime.now(tz) + _dt.timedelta(seconds=SKEW)

    @classmethod
    def utcnow(cls) -> Any:
        return _dt.datetime.now(_dt.UTC).replace(tzinfo=None) + _dt.timedelta(seconds=SKEW)


def install() -> None:
    import importlib
    import pkgutil

    import conveyor._runtime

    # Load every runtime module now (the package loads them lazily), so each gets patched.
    for info in pkgutil.iter_modules(conveyor._runtime.__path__, "conveyor._runtime."):
        importlib.import_module(info.name)

    time.time = _time
    time.time_ns = _time_ns
    for name, module in list(sys.modules.items()):
        # Only modules that ask for the time of day: swapping the class where values
        # are type-checked (rows from the database) would break isinstance there.
        if name.startswith("conveyor") and getattr(module, "datetime", None) is _dt.datetime \
                and "now(" in _source(module):
            module.datetime = SkewedDatetime  # type: ignore[attr-defined]


def _source(module: Any) -> str:
    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py"):
        return ""
    with open(path, encoding="utf-8") as f:
        return f.read()


install()

from . import app as _chaos  # noqa: E402  (after the clock is skewed)

app = _chaos.app
