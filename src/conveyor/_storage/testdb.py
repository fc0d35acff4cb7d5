"""Throwaway PostgreSQL databases (the testing toolkit's fixtures): a migrated
template once per session, then one copy of it per test, dropped at its end."""

from __future__ import annotations

import secrets
from urllib.parse import urlsplit, urlunsplit


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def create_database(admin_url: str, prefix: str, template: str | None = None) -> tuple[str, str]:
    """Create an empty database (or a copy of ``template``) on the server of
    ``admin_url``; returns its name and URL."""
    if urlsplit(admin_url).scheme.lower() not in ("postgresql", "postgres"):
        raise ValueError(f"a PostgreSQL URL is needed to create test databases, got {admin_url!r}")
    import psycopg  # here, not at the top: the pytest plugin loads this without the extra
    from psycopg import sql

    name = f"{prefix}_{secrets.token_hex(6)}"
    statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        statement = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(template))
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
        conn.execute(statement)
    return name, _with_database(admin_url, name)


def drop_database(admin_url: str, name: str) -> None:
    """Drop it, disconnecting whoever is still connected."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))
