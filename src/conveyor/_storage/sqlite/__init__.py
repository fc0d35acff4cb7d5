"""The SQLite backend: ``storage.py`` (the Storage), ``connection.py`` (its thread and
connections), ``batch.py`` (executemany paths), ``sql/`` and ``migrations/``."""

from .connection import SQLiteConfig
from .storage import SQLiteStorage

__all__ = ["SQLiteConfig", "SQLiteStorage"]
