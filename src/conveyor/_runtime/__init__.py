"""The worker runtime (private): producers, executor, acker and services.

It depends on the model (``Registry``), the observed storage and storage, never on
the app above it.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .service import Service
    from .worker import Worker


def __getattr__(name: str) -> object:
    """``Worker`` and ``Service`` on first use (PEP 562): the app imports its services'
    helpers (``_runtime.cron``, ``_runtime.pruner``) without loading the whole worker."""
    if name == "Worker":
        from .worker import Worker

        return Worker
    if name == "Service":
        from .service import Service

        return Service
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["Service", "Worker"]
