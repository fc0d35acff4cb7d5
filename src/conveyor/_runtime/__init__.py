"""The worker runtime (private): producers, executor, acker and services."""

from ._worker import Worker

__all__ = ["Worker"]
