"""``conveyor workflows show ID``: a workflow's jobs, their dependencies and states."""

from __future__ import annotations

import dataclasses

import click
from rich import box
from rich.table import Table
from rich.text import Text

from .._app import WorkflowInfo
from .._redact import redact_secrets
from ._base import CONTEXT, EPILOG, CliFailure, common_options, json_option, run_async
from ._loading import open_app
from ._render import console, print_json, state_text, when


def workflow_table(info: WorkflowInfo) -> Table:
    waits: dict[int, list[int]] = {}
    for edge in info.edges:
        waits.setdefault(edge.job_id, []).append(edge.depends_on)
    counts = ", ".join(f"{n} {s}" for s, n in info.counts.items() if n)
    table = Table(box=box.SIMPLE_HEAVY, title=f"Workflow {info.id} ({counts})")
    for header in ("id", "task", "state", "depends on", "finished"):
        table.add_column(header)
    for job in info.jobs:
        table.add_row(str(job.id), Text(job.task), state_text(job.state),
                      ", ".join(f"#{i}" for i in waits.get(job.id, [])) or "-",
                      when(job.finished_at, short=True))
    return table


@click.group(context_settings=CONTEXT, epilog=EPILOG)
def workflows() -> None:
    """Workflows (jobs with dependencies, docs/workflows.md): show one."""


@workflows.command("show", epilog=EPILOG)
@click.argument("workflow_id", metavar="ID")
@json_option
@common_options
def workflows_show(workflow_id: str, as_json: bool, app_path: str | None,
                   url: str | None) -> None:
    """A workflow's jobs with their states and what each waits on."""
    app = open_app(app_path, url)
    info = run_async(app, lambda: app.get_workflow_async(workflow_id))
    if info is None:
        raise CliFailure(f"no workflow with id {workflow_id}")
    if as_json:
        print_json({"id": info.id, "counts": info.counts, "finished": info.finished,
                    "failed": info.failed, "jobs": [redact_secrets(j).to_dict() for j in info.jobs],
                    "edges": [dataclasses.asdict(e) for e in info.edges]})
    else:
        console().print(workflow_table(info))
