"""The worker runtime (private): producers, executor, acker and services.

It depends on the model (``Registry``), the observed storage and storage, never on
the app above it.
"""

from .service import Service
from .worker import Worker

__all__ = ["Service", "Worker"]
