"""Throwaway PostgreSQL databases for the testing toolkit's pytest fixtures.

The plugin (an interface) may not hold SQL or a driver; it asks here, and this asks
the storage package."""

from __future__ import annotations

from .._storage.testdb import create_database, drop_database

__all__ = ["create_database", "drop_database"]
