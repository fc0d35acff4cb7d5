"""``conveyor batches show ID``: a batch's counts and callbacks."""

from __future__ import annotations

import click
from rich.table import Table

from .._app import Batch
from .._redact import mask
from ._base import CONTEXT, EPILOG, CliFailure, common_options, json_option, run_async
from ._loading import open_app
from ._render import console, print_json, when


def batch_table(batch: Batch) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    state = "open" if batch.open else "finished" if batch.finished else "closed, running"
    rows = [("batch", str(batch.id)), ("state", state), ("total", str(batch.total)),
            ("pending", str(batch.pending)), ("completed", str(batch.completed)),
            ("discarded", str(batch.discarded)), ("cancelled", str(batch.cancelled))]
    rows += [(name, f"job #{job_id}") for name, job_id in (
        ("on_success", batch.on_success), ("on_complete", batch.on_complete),
        ("on_discard", batch.on_discard)) if job_id is not None]
    rows += [("created", when(batch.created_at)), ("finished", when(batch.finished_at))]
    for key, value in rows:
        grid.add_row(key, value)
    return grid


@click.group(context_settings=CONTEXT, epilog=EPILOG)
def batches() -> None:
    """Batches of jobs with callbacks (docs/workflows.md): show one."""


@batches.command("show", epilog=EPILOG)
@click.argument("batch_id", metavar="ID", type=click.IntRange(min=1))
@json_option
@common_options
def batches_show(batch_id: int, as_json: bool, app_path: str | None, url: str | None) -> None:
    """A batch's counts (total, pending, completed, discarded, cancelled) and callbacks."""
    app = open_app(app_path, url)
    batch = run_async(app, lambda: app.get_batch_async(batch_id))
    if batch is None:
        raise CliFailure(f"no batch with id {batch_id}")
    if as_json:
        print_json({"id": batch.id, "open": batch.open, "finished": batch.finished,
                    "total": batch.total, "pending": batch.pending,
                    "completed": batch.completed, "discarded": batch.discarded,
                    "cancelled": batch.cancelled, "on_success": batch.on_success,
                    "on_complete": batch.on_complete, "on_discard": batch.on_discard,
                    "created_at": batch.created_at.isoformat(),
                    "finished_at": batch.finished_at.isoformat() if batch.finished_at else None,
                    "meta": mask(batch.meta)})
    else:
        console().print(batch_table(batch))
