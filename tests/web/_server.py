"""A real dashboard server for browser tests: uvicorn on 127.0.0.1 and a free port,
on its own thread, stopped at the end of the block."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

import uvicorn

#: Debian's chromium; ``CONVEYOR_CHROMIUM`` points elsewhere.
CHROMIUM = os.environ.get("CONVEYOR_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]
ENV_REQUIRE = "CONVEYOR_REQUIRE_BROWSER"


def browser_missing() -> str | None:
    """Why browser tests cannot run here, or None when they can."""
    if not os.path.exists(CHROMIUM):
        return (f"{CHROMIUM} not found: install Debian's chromium (apt-get install -y chromium) "
                f"to run the browser tests; {ENV_REQUIRE}=1 (CI) makes this a failure")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Python Playwright is not installed (pip install -e '.[dev]')"
    return None


@contextlib.contextmanager
def serve(asgi: Any) -> Iterator[str]:
    """Serve ``asgi`` and yield its base URL."""
    config = uvicorn.Config(asgi, host="127.0.0.1", port=0, log_level="warning",
                            lifespan="on", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="dashboard-server", daemon=True)
    thread.start()
    try:
        deadline = threading.Event()
        for _ in range(200):
            if server.started:
                break
            deadline.wait(0.05)
        assert server.started, "the dashboard server did not start"
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)
