"""The Quickstart's shape for the CLI safety tests: a task on its own queue, and one
that fails with terminal escape sequences in its error. URL from $CONVEYOR_URL."""

from __future__ import annotations

from conveyor import Conveyor

app = Conveyor()

#: ESC[2J (clear screen), an OSC 8 hyperlink ended by BEL, a CR, and a C1 CSI.
HOSTILE = "\x1b[2J\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07 done\rover\x9b31m"


@app.task(queue="mail", max_attempts=5)
async def send_email(to: str, subject: str) -> str:
    return f"mailed {to}"


@app.task(queue="hostile", max_attempts=1)
def explode(*args: object, **kwargs: object) -> None:
    raise RuntimeError(HOSTILE)
