"""``conveyor demo``: a few thousand jobs through an in-process worker, shown live.

It runs on its own ``./.conveyor-demo/conveyor-demo.db`` (never ``$CONVEYOR_URL``; only
``--url`` points it elsewhere), in its own ``demo-*`` queues, and refuses a target that
holds anything else (see ``_demo_target``). Re-run, it deletes its previous jobs (by
queue) first, so ``conveyor jobs list`` afterwards shows this run only.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import sys
import time
from collections.abc import Iterator
from typing import Any

import click
from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from .._app import Conveyor
from .._config import WorkerConfig
from .._context import current_job
from .._job import FINAL_STATES, Job, JobState
from .._task import JobSpec, Task
from ._base import EPILOG, EXIT_INTERRUPTED
from ._demo_target import (
    DEMO_URL,
    check_target,
    clean_previous,
    next_steps,
    prepare_default,
    redacted_url,
)
from ._loading import check_url
from ._render import STATE_STYLES, last_error

#: Queue -> concurrency of the demo's worker.
DEMO_QUEUES = {"demo-mail": 50, "demo-images": 8, "demo-inventory": 20, "demo-billing": 10,
               "demo-webhooks": 2}
#: Queue -> the one demo task it holds.
DEMO_TASKS = {"demo-mail": "send_welcome_email", "demo-images": "resize_image",
              "demo-inventory": "sync_inventory", "demo-billing": "charge_card",
              "demo-webhooks": "flaky_webhook"}
BATCH = 1000
POLL_INTERVAL = 0.2


@dataclasses.dataclass(frozen=True, slots=True)
class DemoTasks:
    welcome: Task[Any, Any]
    resize: Task[Any, Any]
    inventory: Task[Any, Any]
    charge: Task[Any, Any]
    webhook: Task[Any, Any]


def build_app(url: str) -> tuple[Conveyor, DemoTasks]:
    """The demo's app and tasks, made fresh for each run (no module-level app)."""
    app = Conveyor(url)

    @app.task(queue="demo-mail")
    async def send_welcome_email(user_id: int, email: str) -> dict[str, Any]:
        await asyncio.sleep(random.uniform(0.001, 0.01))
        return {"sent_to": email}

    @app.task(queue="demo-images")
    def resize_image(image_id: int, width: int, height: int) -> dict[str, int]:
        checksum = sum((i * image_id) % 251 for i in range(2_000))  # a little CPU work
        return {"image_id": image_id, "width": width // 2, "height": height // 2,
                "checksum": checksum}

    @app.task(queue="demo-inventory", backoff=0.2)
    async def sync_inventory(sku: str, flaky: bool = False) -> int:
        await asyncio.sleep(0.005)
        if flaky and current_job().attempt == 1:
            raise ValueError(f"inventory service timed out for {sku}")
        return len(sku)

    @app.task(queue="demo-billing")
    async def charge_card(order_id: int, cents: int) -> dict[str, int]:
        await asyncio.sleep(0.005)
        return {"order_id": order_id, "charged": cents}

    @app.task(queue="demo-webhooks", max_attempts=3, backoff=0.1)
    async def flaky_webhook(url: str) -> None:
        raise ConnectionError(f"POST {url}: 503 Service Unavailable")

    tasks = DemoTasks(send_welcome_email, resize_image, sync_inventory, charge_card,
                      flaky_webhook)
    return app, tasks


def build_specs(tasks: DemoTasks, total: int, seed: int = 7) -> list[JobSpec]:
    """``total`` jobs: 40% mail, 30% images, 20% inventory (5% of them fail once),
    10% card charges delayed 2-4 s, and exactly one webhook that always fails."""
    rng = random.Random(seed)
    specs = [tasks.webhook.job("https://hooks.example.com/orders")]
    for i in range(total - 1):
        kind = i % 10
        if kind < 4:
            specs.append(tasks.welcome.job(i, f"user{i}@example.com"))
        elif kind < 7:
            specs.append(tasks.resize.job(i, rng.choice([640, 1280, 1920]), 1080))
        elif kind < 9:
            specs.append(tasks.inventory.job(f"SKU-{i:05d}", flaky=rng.random() < 0.05))
        else:
            delay = rng.uniform(2.0, 4.0)
            specs.append(tasks.charge.options(delay=delay).job(i, rng.randint(100, 99_999)))
    return specs


# -- the live run ------------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class Outcome:
    counts: dict[str, int]
    enqueue_seconds: float
    run_seconds: float
    jobs: list[Job]
    interrupted: bool


def _delta(now: dict[str, int], baseline: dict[str, int]) -> dict[str, int]:
    return {state: max(now.get(state, 0) - baseline.get(state, 0), 0) for state in now}


def _finished(counts: dict[str, int]) -> int:
    return sum(counts.get(state.value, 0) for state in FINAL_STATES)


def states_table(counts: dict[str, int]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for state in JobState:
        table.add_column(Text(state.value, style=STATE_STYLES[state.value]), justify="right")
    table.add_row(*(str(counts.get(state.value, 0)) for state in JobState))
    return table


async def _enqueue(app: Conveyor, specs: list[JobSpec]) -> list[int]:
    ids: list[int] = []
    for start in range(0, len(specs), BATCH):
        jobs = await app.enqueue_many_async(specs[start:start + BATCH])
        ids.extend(job.id for job in jobs)
    return ids


async def _watch(app: Conveyor, baseline: dict[str, int], total: int,
                 runner: asyncio.Task[str | None], out: Console) -> dict[str, int]:
    """Poll counts and redraw until every demo job is final or the worker stops."""
    progress = Progress(TextColumn("[bold]finished"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(),
                        console=out)
    bar = progress.add_task("finished", total=total)
    counts = _delta(await _counts(app), baseline)
    with Live(Group(progress, states_table(counts)), console=out, refresh_per_second=10) as live:
        while True:
            counts = _delta(await _counts(app), baseline)
            progress.update(bar, completed=min(_finished(counts), total))
            live.update(Group(progress, states_table(counts)))
            if _finished(counts) >= total or runner.done():
                return counts
            await asyncio.sleep(POLL_INTERVAL)


async def _fetch(app: Conveyor, ids: list[int]) -> list[Job]:
    """The demo's jobs, however many other jobs the database holds."""
    wanted = set(ids)
    found: list[Job] = []
    cursor: int | None = max(ids) + 1
    while cursor is not None and cursor > min(ids):
        page = await app.list_jobs_async(limit=10_000, before_id=cursor)
        found.extend(job for job in page if job.id in wanted)
        cursor = page[-1].id if len(page) == 10_000 else None
    return found


async def _counts(app: Conveyor) -> dict[str, int]:
    """Jobs per state in the demo's queues only."""
    counts = {state.value: 0 for state in JobState}
    for queue in DEMO_QUEUES:
        for state, n in (await app.count_jobs_async(queue=queue)).items():
            counts[state] += n
    return counts


async def run_jobs(app: Conveyor, tasks: DemoTasks, total: int, out: Console) -> Outcome:
    baseline = await _counts(app)
    started = time.monotonic()
    ids = await _enqueue(app, build_specs(tasks, total))
    enqueued = time.monotonic()
    config = WorkerConfig(queues=DEMO_QUEUES, shutdown_timeout=5.0, stage_interval=0.2)
    stop = asyncio.Event()
    runner = asyncio.create_task(app.run_worker(config=config, stop=stop))
    try:
        counts = await _watch(app, baseline, total, runner, out)
    finally:
        stop.set()
        await runner
    finished = time.monotonic()
    counts = _delta(await _counts(app), baseline)
    return Outcome(counts, enqueued - started, finished - enqueued, await _fetch(app, ids),
                   interrupted=_finished(counts) < total)


# -- output ---------------------------------------------------------------------------------


def summary_table(outcome: Outcome, total: int) -> Table:
    table = Table(title="Conveyor demo: summary", title_justify="left", box=box.ROUNDED,
                  show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for state in JobState:
        n = outcome.counts.get(state.value, 0)
        if n or state.is_final:
            table.add_row(Text(state.value, style=STATE_STYLES[state.value]), str(n))
    attempts = sum(job.attempt for job in outcome.jobs)
    retries = sum(max(job.attempt - 1, 0) for job in outcome.jobs)
    done = _finished(outcome.counts)
    rate = done / outcome.run_seconds if outcome.run_seconds > 0 else 0.0
    table.add_row("jobs", f"{total} (enqueued in {outcome.enqueue_seconds:.2f} s)")
    table.add_row("wall time", f"{outcome.run_seconds:.2f} s")
    table.add_row("throughput", f"{rate:,.0f} jobs/s (charge_card jobs wait 2-4 s by design)")
    table.add_row("attempts used", f"{attempts} ({retries} retries)")
    for job in outcome.jobs:
        if job.state is JobState.DISCARDED:
            table.add_row("discarded job", Text(f"#{job.id} {job.task}: {last_error(job)}",
                                            style="red"))
    return table


def hint(url: str) -> str:
    return f"conveyor jobs list --state discarded --url {redacted_url(url)}"


@contextlib.contextmanager
def _logs_to(out: Console) -> Iterator[None]:
    """Worker warnings print above the live display; info stays quiet."""
    logger = logging.getLogger("conveyor")
    handler = RichHandler(console=out, level=logging.WARNING, show_path=False, show_time=False)
    saved = logger.propagate, logger.level
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate, logger.level = saved[0], saved[1]


async def _prepare(app: Conveyor, url: str, out: Console) -> None:
    """Refuse a target holding anything but the demo's jobs; delete those."""
    previous = await check_target(app, url, DEMO_QUEUES, DEMO_TASKS)
    if previous:
        removed = await clean_previous(app, DEMO_QUEUES)
        out.print(Text(f"removed {removed} job(s) of a previous demo run "
                       f"(queues {', '.join(DEMO_QUEUES)})", style="dim"))


def run_demo(url: str, total: int) -> int:
    """Run the demo on ``url``; returns the exit code (130 when interrupted)."""
    out = Console(highlight=False)
    app, tasks = build_app(url)

    async def main() -> Outcome | None:
        try:
            await _prepare(app, url, out)
            out.print(Text.assemble(
                ("Conveyor demo", "bold"),
                f": {total} jobs on {redacted_url(url)}, worker queues {DEMO_QUEUES}"))
            return await run_jobs(app, tasks, total, out)
        finally:
            await app.close_async()

    with _logs_to(out):
        outcome = asyncio.run(main())
    assert outcome is not None
    out.print()
    out.print(summary_table(outcome, total))
    if outcome.interrupted:
        out.print("interrupted before every job finished", style="yellow")
    for line in next_steps(hint(url)):
        out.print(Text(line, style="bold"), soft_wrap=True)
    return EXIT_INTERRUPTED if outcome.interrupted else 0


@click.command(epilog=EPILOG)
@click.option("--jobs", "total", type=click.IntRange(10, 100_000), default=3000,
              show_default=True, help="How many jobs to enqueue.")
@click.option("--url", metavar="URL",
              help=f"Database to run on. Default: {DEMO_URL} (never $CONVEYOR_URL). The demo "
              "refuses a database that holds jobs other than its own.")
def demo(total: int, url: str | None) -> None:
    """Enqueue a few thousand demo jobs on the demo's own database and run them live.

    The database is ./.conveyor-demo/conveyor-demo.db unless --url names another;
    $CONVEYOR_URL is ignored. Afterwards, the command it prints lists what happened.
    """
    target = url or prepare_default()
    check_url(target)
    sys.exit(run_demo(target, total))
