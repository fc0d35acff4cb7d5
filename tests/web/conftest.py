"""Fixtures of the dashboard tests: a seeded world on each backend and an HTTP client
that behaves like a same-origin browser (CSRF cookie and token included)."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from conveyor import Conveyor

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from conveyor.web import create_app

from ._seed import make_app, seed_jobs

BASE = "http://localhost"
TOKEN = re.compile(r'name="csrf_token" (?:value|content)="([0-9a-f]{64})"')


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/web/" in str(item.fspath):
            item.add_marker(pytest.mark.filterwarnings(
                "ignore:Using `httpx` with `starlette.testclient`"))


class Browser:
    """A TestClient with the headers a browser sends on a same-origin form post."""

    def __init__(self, client: TestClient) -> None:
        self.client = client

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.client.get(path, **kwargs)

    def token(self, path: str = "/") -> str:
        match = TOKEN.search(self.get(path).text)
        assert match, f"no CSRF token on {path}"
        return match.group(1)

    def post(self, path: str, data: dict[str, str] | None = None, *, token: str | None = None,
             headers: dict[str, str] | None = None, **kwargs: Any) -> Any:
        form = {"csrf_token": token if token is not None else self.token(), **(data or {})}
        sent = {"origin": BASE, "sec-fetch-site": "same-origin", **(headers or {})}
        return self.client.post(path, data=form, headers=sent, follow_redirects=False, **kwargs)


@pytest.fixture
def world(db_url: str) -> Iterator[Conveyor]:
    """Jobs in every state (see _seed), on each backend."""
    app = make_app(db_url)
    seed_jobs(app)
    try:
        yield app
    finally:
        app.close()


def browser_for(app: Conveyor, **options: Any) -> Iterator[Browser]:
    with TestClient(create_app(app, **options), base_url=BASE) as client:
        yield Browser(client)


@pytest.fixture
def browser(world: Conveyor) -> Iterator[Browser]:
    yield from browser_for(world)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "browser: drives Debian's chromium with Playwright")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Skipped browser tests are shouted about, as missing Postgres is."""
    from .test_browser import BROWSER_MISSING

    reports = terminalreporter.stats.get("skipped", [])
    skipped = [r for r in reports if BROWSER_MISSING in str(getattr(r, "longrepr", ""))]
    if skipped:
        terminalreporter.write_sep("!", "BROWSER TESTS WERE SKIPPED", red=True, bold=True)
        terminalreporter.write_line(f"{len(skipped)} skipped: {skipped[0].longrepr[2]}")
        terminalreporter.write_sep("!", "BROWSER TESTS WERE SKIPPED", red=True, bold=True)
    from .test_http_api_server import NODE_MISSING

    node = [r for r in reports if NODE_MISSING in str(getattr(r, "longrepr", ""))]
    if node:
        terminalreporter.write_sep("!", NODE_MISSING, red=True, bold=True)
        terminalreporter.write_line(f"{len(node)} skipped: {node[0].longrepr[2]}")
        terminalreporter.write_sep("!", NODE_MISSING, red=True, bold=True)
