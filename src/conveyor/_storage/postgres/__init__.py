"""The PostgreSQL backend, one Storage in two links: ``pools.py`` (``PostgresPools``: the
connection pools, how a named statement runs, opening, closing, migrations and health),
then ``storage.py`` (``PostgresStorage``: the batch paths and the multi-statement
transactions). Beside them ``connection.py`` (config, errors), ``listener.py``
(LISTEN/NOTIFY), ``batch.py`` (array and tuple-row paths), ``copy_insert.py`` (COPY of
plain batches), ``fair.py`` (the fair claim), ``workflow.py`` (the workflow steps'
driver), ``schema.py`` (migrations, health), ``sql/``, ``testing.sql`` and
``migrations/``."""

from .connection import PostgresConfig, config_from_url
from .storage import PostgresStorage

__all__ = ["PostgresConfig", "PostgresStorage", "config_from_url"]
