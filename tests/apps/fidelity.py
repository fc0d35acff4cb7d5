"""Tasks run by real ``conveyor worker`` processes in tests/test_fidelity_processes.py
(issue 14: rolling deploys, shutdown reaching handlers, the cluster-wide Throttle).

``old_app`` is the app before a deploy (no ``fid_new``), ``new_app`` after it; both read
``$CONVEYOR_URL``. Handlers append ``event task job_id key wall_time pid`` lines to
``$CONVEYOR_TEST_LEDGER`` (one ``os.write`` of an O_APPEND file per line).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from conveyor import Conveyor, Snooze, Throttle, current_job

#: How long a handler waits for the shutdown before it gives up (the test fails then).
SHUTDOWN_WAIT = 60.0
#: retry_after of the handler that throttles its queue.
THROTTLE_SECONDS = 8.0


def note(event: str, key: object = "-") -> None:
    job = current_job()
    line = f"{event} {job.task} {job.id} {key} {time.time():.6f} {os.getpid()}\n"
    fd = os.open(os.environ["CONVEYOR_TEST_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _first_run(marker: str) -> bool:
    """True the first time a job with this marker runs (the marker file is made then)."""
    try:
        Path(marker).touch(exist_ok=False)
    except FileExistsError:
        return False
    return True


def build(url: str | None = None, *, new: bool = True) -> Conveyor:
    app = Conveyor(url)

    @app.task(name="fid_old", queue="deploy")
    def fid_old() -> int:
        note("run")
        return os.getpid()

    if new:
        @app.task(name="fid_new", queue="deploy")
        def fid_new(x: int) -> dict[str, Any]:
            note("run")
            return {"double": 2 * x, "pid": os.getpid()}

    @app.task(name="fid_long", queue="long")
    async def fid_long(marker: str) -> int:
        """Runs until the worker drains, then gives itself back; done on its next run."""
        if not _first_run(marker):
            note("done")
            return os.getpid()
        note("started")
        seen = await current_job().wait_shutdown(timeout=SHUTDOWN_WAIT)
        note("shutdown-seen" if seen else "no-shutdown")
        raise Snooze(0)

    @app.task(name="fid_long_sync", queue="long")
    def fid_long_sync(marker: str) -> int:
        if not _first_run(marker):
            note("done")
            return os.getpid()
        note("started")
        seen = current_job().shutdown_requested.wait(timeout=SHUTDOWN_WAIT)
        note("shutdown-seen" if seen else "no-shutdown")
        raise Snooze(0)

    @app.task(name="fid_hit", queue="api")
    def fid_hit(marker: str) -> int:
        """Throttles its queue once (while the marker file exists), then succeeds."""
        note("start")
        try:
            os.unlink(marker)
        except FileNotFoundError:
            return os.getpid()
        raise Throttle(retry_after=THROTTLE_SECONDS, scope="queue")

    return app


old_app = build(new=False)
new_app = build(new=True)
