"""``conveyor migrate``: apply, list (--dry-run) or print (--show-sql) schema migrations."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click
from rich.text import Text

from .._app import Conveyor
from .._app.operations import Operations
from .._errors import DatabaseUnavailableError
from ._base import EPILOG, EXIT_SCHEMA, common_options, json_option
from ._loading import check_url, resolve_url
from ._render import console, print_json

if TYPE_CHECKING:
    from .._app import Migration


def _describe(migrations: list[Migration], *, with_sql: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in migrations:
        item: dict[str, Any] = {"version": m.version, "name": m.name}
        if with_sql:
            item["sql"] = m.sql
        out.append(item)
    return out


def _print_sql(migrations: list[Migration]) -> None:
    for m in migrations:
        click.echo(f"-- migration {m.version:04d}_{m.name}")
        click.echo(m.sql.rstrip())
        click.echo()


def apply(app: Conveyor, *, dry_run: bool, show_sql: bool, as_json: bool) -> bool:
    """Apply (or, with dry_run/show_sql, only list) migrations; True if any are pending.

    With show_sql and an unreachable database, prints every migration of the app's
    dialect instead, without connecting.
    """
    read_only = dry_run or show_sql
    ops = Operations(app, source="cli")
    try:
        found = ops.pending_migrations() if read_only else app.migrate()
    except DatabaseUnavailableError as exc:
        if not show_sql:
            raise
        click.echo(f"database unreachable ({' '.join(str(exc).split())}); showing all "
                   f"{ops.dialect} migrations", err=True)
        found = ops.all_migrations()
        if as_json:
            print_json({"offline": True, "pending": _describe(found, with_sql=True)})
        else:
            _print_sql(found)
        return False
    finally:
        app.close()
    _report_migrations(found, read_only=read_only, show_sql=show_sql, as_json=as_json)
    return read_only and bool(found)


def _report_migrations(found: list[Migration], *, read_only: bool, show_sql: bool,
                       as_json: bool) -> None:
    if as_json:
        key = "pending" if read_only else "applied"
        print_json({key: _describe(found, with_sql=show_sql)})
        return
    if show_sql:
        _print_sql(found)
        if not found:
            click.echo("-- nothing pending: the schema is up to date")
        return
    out = console()
    if not found:
        out.print("nothing to apply: the schema is up to date", style="green")
        return
    verb = "pending" if read_only else "applied"
    for m in found:
        out.print(Text(f"{verb} {m.version:04d}_{m.name}"))
    if read_only:
        out.print(f"{len(found)} migration(s) pending; run `conveyor migrate` to apply",
                  style="yellow")


@click.command(epilog=EPILOG)
@click.option("--dry-run", is_flag=True, help="List pending migrations; exit 4 if any.")
@click.option("--show-sql", is_flag=True,
              help="Print the SQL of pending migrations without applying them "
              "(all migrations when the database is unreachable).")
@json_option
@common_options
def migrate(dry_run: bool, show_sql: bool, as_json: bool, app_path: str | None,
            url: str | None) -> None:
    """Apply pending schema migrations (PostgreSQL needs this once per upgrade)."""
    target = resolve_url(app_path, url)
    app = check_url(target)
    pending = apply(app, dry_run=dry_run, show_sql=show_sql, as_json=as_json)
    if pending and dry_run:
        sys.exit(EXIT_SCHEMA)
