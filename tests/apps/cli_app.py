"""Tasks for the CLI tests' real `conveyor worker` processes; URL from $CONVEYOR_URL."""

from __future__ import annotations

import asyncio

from conveyor import Conveyor

app = Conveyor()  # URL from $CONVEYOR_URL

not_an_app = 42


@app.task
async def add(a: int, b: int) -> int:
    await asyncio.sleep(0.001)
    return a + b


@app.task(queue="sync")
def shout(text: str) -> str:
    return text.upper()


@app.task(max_attempts=2, backoff=0.01)
async def always_fails() -> None:
    raise RuntimeError("boom [red]not markup[/red]")
