"""A user process for scenario 11: reads and enqueues through the public API until told
to stop, and notes every id it enqueued and every error it saw.

``python -m tests.chaos.reader URL OUT_DIR``: runs until ``OUT_DIR/stop`` exists, writes
``OUT_DIR/enqueued.txt`` (one id a line), ``OUT_DIR/errors.txt`` and ``OUT_DIR/reads.txt``.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

from conveyor import Conveyor

from . import app as chaos


def main(url: str, out: Path) -> int:
    app = Conveyor(url)
    task = app.task(name="work", max_attempts=25)(chaos.work.fn)
    r = random.Random(11)
    enqueued: list[int] = []
    errors: list[str] = []
    reads = 0
    deadline = time.monotonic() + 300
    while not (out / "stop").exists() and time.monotonic() < deadline:
        try:
            app.count_jobs()
            app.list_jobs(limit=20)
            if enqueued:
                app.get_job(r.choice(enqueued))
            reads += 3
            enqueued += [j.id for j in app.enqueue_many([task.job(0.001) for _ in range(5)])]
        except Exception as exc:  # any error a user would see
            errors.append(f"{type(exc).__name__}: {exc}")
        with open(out / "enqueued.txt", "w") as f:
            f.write("".join(f"{i}\n" for i in enqueued))
    (out / "errors.txt").write_text("".join(f"{e}\n" for e in errors))
    (out / "reads.txt").write_text(f"{reads}\n")
    app.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2])))
