"""A skip that hides a missing piece fails a complete run (tests/_require.py)."""

from __future__ import annotations

import pytest

from . import _require


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("CI", _require.ALL, *_require.FLAGS):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_a_developer_run_skips_a_missing_piece(clean_env: pytest.MonkeyPatch) -> None:
    with pytest.raises(pytest.skip.Exception, match="no such thing"):
        _require.import_or_skip("conveyor_no_such_module", "no such thing")


@pytest.mark.parametrize("flag", ["CI", _require.ALL, *_require.FLAGS])
def test_a_complete_run_fails_on_a_missing_piece(clean_env: pytest.MonkeyPatch,
                                                 flag: str) -> None:
    clean_env.setenv(flag, "true" if flag == "CI" else "1")
    with pytest.raises(pytest.fail.Exception, match=r"no such thing.*complete run"):
        _require.import_or_skip("conveyor_no_such_module", "no such thing")
    with pytest.raises(pytest.fail.Exception, match="NO GIT HISTORY"):
        _require.missing("NO GIT HISTORY")


def test_a_present_piece_is_imported(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv(_require.ALL, "1")
    assert _require.import_or_skip("json", "json").dumps([]) == "[]"
