"""Tasks on three queues for the policy CLI tests; URL from $CONVEYOR_URL, version from
$CONVEYOR_APP_VERSION."""

from __future__ import annotations

from conveyor import Conveyor

app = Conveyor()


@app.task
async def ping() -> str:
    return "pong"


@app.task(queue="emails", retry_on=(ConnectionError,), backoff=lambda attempt, exc: 1.0)
async def send_email(to: str) -> None:
    raise ConnectionError(f"smtp down for {to}")


@app.task(queue="reports", discard_on=ValueError)
def build_report(kind: str) -> str:
    if kind not in ("daily", "weekly"):
        raise ValueError(f"unknown report {kind!r}")
    return kind
