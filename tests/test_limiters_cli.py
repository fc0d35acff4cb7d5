"""``conveyor limiters list`` on both backends: table, JSON, holders, unknown names."""

from __future__ import annotations

from pathlib import Path

from conveyor import Conveyor

from .test_cli import assert_one_line_error, run_cli, run_json

APP = "tests.apps.limiters_app:app"


def test_limiters_list_shows_limiters_and_their_holders(app: Conveyor, db_url: str,
                                                        tmp_path: Path) -> None:
    proc = run_cli(tmp_path, "limiters", "list", "--url", db_url)
    assert proc.returncode == 0, proc.stderr
    assert "Limiters" in proc.stdout and "Holders" not in proc.stdout
    ocr = app.limiter("ocr", concurrency=3)
    permit = ocr.acquire(key="acme")
    with app.limiter("slack", rate="20/s"):
        pass
    proc = run_cli(tmp_path, "limiters", "list", "--url", db_url)
    assert proc.returncode == 0, proc.stderr
    lines = [line.split() for line in proc.stdout.splitlines()]
    assert ["ocr", "concurrency", "3", "30.0", "s", "1"] in [line[:6] for line in lines]
    assert ["slack", "rate", "20/s", "-", "-"] in [line[:5] for line in lines]
    assert "Holders" in proc.stdout and permit.holder in proc.stdout
    doc = run_json(tmp_path, "limiters", "list", "ocr", "--url", db_url)
    assert [r["name"] for r in doc] == ["ocr"]
    assert doc[0]["concurrency"] == 3 and doc[0]["rate"] is None
    (holder,) = doc[0]["holders"]
    assert holder["key"] == "acme" and holder["holder"] == permit.holder
    assert 0 < holder["remaining"] <= 30
    permit.release()
    assert run_json(tmp_path, "limiters", "list", "ocr", "--url", db_url)[0]["holders"] == []


def test_limiters_list_knows_the_apps_limiters_before_their_first_use(
        db_url: str, tmp_path: Path) -> None:
    doc = run_json(tmp_path, "limiters", "list", "--app", APP, "--url", db_url)
    assert {(r["name"], r["rate"], r["concurrency"]) for r in doc} == {
        ("ocr", None, 2), ("slack", "10/s", None)}


def test_an_unknown_limiter_is_refused_with_the_close_names(app: Conveyor, db_url: str,
                                                            tmp_path: Path) -> None:
    app.limiter("ocr", concurrency=1).acquire().release()
    proc = run_cli(tmp_path, "limiters", "list", "ocrr", "--url", db_url)
    assert proc.returncode != 0
    assert_one_line_error(proc)
    assert "no limiter named 'ocrr'" in proc.stderr and "did you mean ocr" in proc.stderr
    proc = run_cli(tmp_path, "limiters", "list", "\x1b[31mred", "--url", db_url)
    assert proc.returncode != 0 and "\x1b" not in proc.stderr
