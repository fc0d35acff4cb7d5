"""Storage: one protocol, two backends, chosen by URL."""

from __future__ import annotations

from urllib.parse import urlsplit

from ._protocol import Storage
from ._wake import WakeHub


def create_storage(url: str, hub: WakeHub, pool_max_size: int = 10) -> Storage:
    """Pick the backend for ``url`` without connecting.

    Example: ``create_storage("sqlite:///jobs.db", WakeHub())``
    """
    if not isinstance(url, str):
        raise TypeError(f"database URL must be a string, got {type(url).__name__}")
    scheme = urlsplit(url).scheme.lower()
    if scheme == "sqlite":
        from ._sqlite import SQLiteConfig, SQLiteStorage

        path = url[len("sqlite:///") :] if url.lower().startswith("sqlite:///") else ""
        if not path:
            raise ValueError(
                f"bad SQLite URL {url!r}: use sqlite:///relative/path.db or sqlite:////abs/path.db"
            )
        return SQLiteStorage(SQLiteConfig(path=path), hub)
    if scheme in ("postgresql", "postgres"):
        from ._postgres import PostgresConfig, PostgresStorage

        return PostgresStorage(PostgresConfig(url=url, max_size=pool_max_size), hub)
    raise ValueError(
        f"unsupported database URL {url!r}: expected sqlite:///path.db or postgresql://..."
    )


__all__ = ["Storage", "WakeHub", "create_storage"]
