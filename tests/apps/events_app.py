"""An app that records every state change it announces, for the tests of who acted
(``tests/test_operator_actions.py``): the CLI loads it with ``--app``."""

from __future__ import annotations

from conveyor import Conveyor, StateChange

app = Conveyor()  # the tests give --url, or rebind it
SEEN: list[StateChange] = []
app.on_state_change(SEEN.append)


@app.task
def noop() -> None:
    """Never run: the tests act on waiting and finished jobs only."""
