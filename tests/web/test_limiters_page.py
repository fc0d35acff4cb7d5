"""The dashboard's Limiters page on both backends: limiters, their limits and holders."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from conveyor import Conveyor

from .conftest import Browser, browser_for


@pytest.fixture
def lbrowser(app: Conveyor) -> Iterator[Browser]:
    yield from browser_for(app)


def test_the_limiters_page_shows_limiters_and_holders(app: Conveyor, lbrowser: Browser) -> None:
    page = lbrowser.get("/limiters")
    assert page.status_code == 200 and "No limiters yet" in page.text
    assert 'href="/limiters"' in lbrowser.get("/").text  # in the navigation
    ocr = app.limiter("ocr", concurrency=3, lease=20)
    slack = app.limiter("slack", rate="20/s")
    held = [ocr.acquire(key="acme"), ocr.acquire(key="<b>globex</b>")]
    with slack:
        pass
    page = lbrowser.get("/limiters").text
    assert 'data-limiter="ocr"' in page and 'data-limiter="slack"' in page
    assert "concurrency 3" in page and "rate <code>20/s</code>" in page
    assert "2 of 3 per key" in page
    for permit in held:
        assert f'data-holder="{permit.holder}"' in page
    assert "&lt;b&gt;globex&lt;/b&gt;" in page and "<b>globex" not in page  # escaped
    live = lbrowser.get("/limiters", headers={"x-conveyor-live": "1"}).text
    assert "<html" not in live and "<h1>Limiters</h1>" in live
    for permit in held:
        permit.release()
    page = lbrowser.get("/limiters").text
    assert "Nobody holds a concurrency slot now" in page and "0 of 3 per key" in page
