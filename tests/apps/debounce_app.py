"""The debounce tests' app: a task with ``Unique(on_conflict="replace")`` keyed by its
document id, and the enqueuing loop each racing process runs (spawned: importable)."""

from __future__ import annotations

import dataclasses
import os
import random
import time
from multiprocessing.synchronize import Barrier
from typing import Any

from conveyor import Conveyor, Task, Unique


@dataclasses.dataclass
class Debounce:
    app: Conveyor
    index: Task[Any, Any]


def build(url: str | None) -> Debounce:
    app = Conveyor(url)

    @app.task(unique=Unique(key=lambda doc_id, text, tag="": str(doc_id), on_conflict="replace"))
    def search_index(doc_id: int, text: str, tag: str = "") -> str:
        """``tag`` is sent equal to ``text`` (once in args, once in kwargs): a job that
        ran with one from one enqueue and the other from another would show it."""
        if tag and tag != text:
            raise AssertionError(f"half-replaced arguments: {text!r} != {tag!r}")
        return text

    return Debounce(app, search_index)


def hammer(url: str, who: str, rounds: int, delay: float, barrier: Barrier,
           results: Any, pause_every: int = 0) -> None:
    """One racing process: after every process is ready, enqueue ``rounds`` times the
    same key (document 7) with this process's arguments; report each job id. With
    ``pause_every``, a pause of up to 0.1 s after that many enqueues lets the job come
    due, so that a worker claims it while the racers replace it."""
    debounce = build(url)
    try:
        debounce.app.count_jobs()  # connect (and check the schema) before the race
        barrier.wait(timeout=60)
        for n in range(rounds):
            text = f"{who}-{n}"
            job = debounce.index.options(delay=delay).enqueue(7, text, tag=text)
            results.put((who, n, job.id, job.duplicate, os.getpid()))
            if pause_every and n % pause_every == pause_every - 1:
                time.sleep(random.uniform(0.0, 0.1))
    finally:
        debounce.app.close()


#: The app ``conveyor worker tests.apps.debounce_app:app`` runs (on ``$CONVEYOR_URL``).
app = build(None).app
