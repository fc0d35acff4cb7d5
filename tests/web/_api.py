"""The HTTP API tests' world: an app with two tasks that records who acted, its tokens,
and a client that talks to the API (TestClient over ASGI; ``_server.serve`` for a real
server)."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

from conveyor import Conveyor, StateChange
from conveyor.web import ApiToken, create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

BASE = "http://localhost"
WRITE = "w-" + "0123456789abcdef" * 2
READ = "r-" + "fedcba9876543210" * 2
TOKENS: list[str | ApiToken] = [WRITE, ApiToken(READ, read_only=True)]


def auth(token: str = WRITE) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def make_app(url: str) -> tuple[Conveyor, list[StateChange]]:
    """send_email(to, subject) on queue mail, resize(path, width=800) on default; every
    state change it announces goes to the list."""
    app = Conveyor(url)
    seen: list[StateChange] = []
    app.on_state_change(seen.append)

    @app.task(queue="mail")
    def send_email(to: str, subject: str) -> str:
        return f"sent to {to}"

    @app.task
    def resize(path: str, width: int = 800) -> dict[str, int]:
        return {"width": width}

    return app, seen


@contextlib.contextmanager
def client_for(app: Conveyor, **options: Any) -> Iterator[TestClient]:
    options.setdefault("api_tokens", TOKENS)
    options.setdefault("auth_failure_delay", 0.01)
    with TestClient(create_app(app, **options), base_url=BASE) as client:
        yield client
