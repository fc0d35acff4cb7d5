"""``conveyor limiters``: the cluster's limiters (``app.limiter``) and who holds them.

A limiter is known once a process used it (it is recorded on first use) or when the
app given with ``--app`` declares it. Naming one nobody declared is refused with the
close names: a typo is likelier than a limiter of the future.
"""

from __future__ import annotations

import dataclasses
import difflib

import click
from rich import box
from rich.console import Group
from rich.table import Table

from .._app import LimiterRow
from .._format import seconds
from ._base import CONTEXT, EPILOG, UsageFailure, common_options, json_option, run_async
from ._loading import open_app
from ._render import console, plain, print_json, safe, when


def _limit(row: LimiterRow) -> str:
    parts = ([f"rate {row.rate}"] if row.rate else []) + (
        [f"concurrency {row.concurrency}"] if row.concurrency else [])
    return ", ".join(parts)


def _tables(rows: list[LimiterRow]) -> Group:
    limiters = Table(box=box.SIMPLE_HEAVY, title="Limiters")
    for header in ("limiter", "limit", "lease", "holders", "declared"):
        limiters.add_column(header)
    holders = Table(box=box.SIMPLE_HEAVY, title="Holders")
    for header in ("limiter", "key", "holder", "since", "lease left"):
        holders.add_column(header)
    for row in rows:
        lease = seconds(row.lease) if row.concurrency else "-"
        limiters.add_row(plain(row.name), _limit(row), lease,
                         str(len(row.holders)) if row.concurrency else "-", when(row.updated_at))
        for h in row.holders:
            holders.add_row(plain(h.name), plain(h.key or "-"), plain(h.holder),
                            when(h.acquired_at), seconds(h.remaining))
    return Group(limiters, holders) if holders.row_count else Group(limiters)


@click.group(context_settings=CONTEXT, epilog=EPILOG)
def limiters() -> None:
    """Limiters used in handlers and outside jobs (app.limiter): list them and their holders."""


@limiters.command("list", epilog=EPILOG)
@click.argument("names", nargs=-1)
@json_option
@common_options
def limiters_list(names: tuple[str, ...], as_json: bool, app_path: str | None,
                  url: str | None) -> None:
    """Every limiter (or those NAMES) with its limit and its live holders."""
    app = open_app(app_path, url)
    rows = run_async(app, app.list_limiters_async)
    known = {row.name for row in rows}
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise UsageFailure(f"no limiter named {safe(name)!r} (none declared it, and "
                               f"no process used it){hint}")
    if names:
        rows = [row for row in rows if row.name in names]
    if as_json:
        print_json([dataclasses.asdict(row) for row in rows])
    else:
        console().print(_tables(rows))
