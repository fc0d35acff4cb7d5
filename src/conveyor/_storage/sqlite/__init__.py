"""The SQLite backend, one Storage in two links: ``file.py`` (``SQLiteFile``: the
storage thread and the sync API's own connections, how a named statement runs, opening,
closing, migrations and health), then ``storage.py`` (``SQLiteStorage``: the batch paths
and the calls of several statements in one transaction). Beside them ``connection.py``
(the thread, the connections and the write lock), ``batch.py`` (executemany paths),
``retiring.py`` (a batch of plain completions moved to history in one statement),
``workflow.py`` (the workflow steps' driver), ``fair.py`` (the fair claim), ``sql/``,
``testing.sql`` and ``migrations/``."""

from .connection import SQLiteConfig
from .storage import SQLiteStorage

__all__ = ["SQLiteConfig", "SQLiteStorage"]
