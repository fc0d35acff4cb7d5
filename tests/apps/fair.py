"""The fair-keys tests' task, run by real `conveyor worker` processes
(tests/test_fair_keys.py): each start appends ``tenant pid`` to
``$CONVEYOR_TEST_LEDGER`` (one ``os.write`` of an O_APPEND file: lines of concurrent
processes never interleave)."""

from __future__ import annotations

import os

from conveyor import Conveyor, Task


def build(url: str | None = None) -> tuple[Conveyor, Task[[str, int], None]]:
    app = Conveyor(url)

    @app.task(queue="fair", fair_key=lambda tenant, *_, **__: tenant)
    def tenant_job(tenant: str, n: int) -> None:
        line = f"{tenant} {os.getpid()}\n"
        fd = os.open(os.environ["CONVEYOR_TEST_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    return app, tenant_job


#: What `conveyor worker tests.apps.fair:app` loads (on $CONVEYOR_URL; opened lazily).
app, tenant_job = build(os.environ.get("CONVEYOR_URL"))
