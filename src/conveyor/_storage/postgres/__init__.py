"""The PostgreSQL backend: ``storage.py`` (the Storage and its pools), ``connection.py``
(config, errors), ``listener.py`` (LISTEN/NOTIFY), ``batch.py`` (array and tuple-row
paths), ``sql/`` and ``migrations/``."""

from .connection import PostgresConfig, config_from_url
from .storage import PostgresStorage

__all__ = ["PostgresConfig", "PostgresStorage", "config_from_url"]
