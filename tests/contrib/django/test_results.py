"""Reading a Django ``TaskError`` back from what Conveyor stores of a failed attempt."""

from __future__ import annotations

import traceback

import pytest

pytest.importorskip("django", reason="Django 6 needs Python >= 3.12: tests/contrib/django "
                    "run in .venv-django (make test-django)")

from conveyor.contrib.django._results import exception_class_path


class Outer:
    class InnerError(Exception):
        pass


def stored(exc: BaseException) -> dict[str, str]:
    """An error entry as the worker writes it: ``Name: message`` and the traceback."""
    return {"error": f"{type(exc).__name__}: {exc}",
            "traceback": "".join(traceback.format_exception(exc))}


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_module_and_builtin_classes() -> None:
    assert exception_class_path(stored(raised(ValueError("x: y")))) == "builtins.ValueError"
    assert exception_class_path(stored(raised(KeyError("k")))) == "builtins.KeyError"
    mine = raised(Outer.InnerError("boom"))
    assert exception_class_path(stored(mine)) == f"{__name__}.Outer.InnerError"


def test_notes_chains_and_groups() -> None:
    noted = raised(LookupError("missing"))
    noted.add_note("a note: with a colon")
    noted.add_note("LookupError")
    assert exception_class_path(stored(noted)) == "builtins.LookupError"
    try:
        try:
            raise KeyError("first")
        except KeyError as first:
            raise RuntimeError("second") from first
    except RuntimeError as chained:
        assert exception_class_path(stored(chained)) == "builtins.RuntimeError"
    group = raised(ExceptionGroup("many", [ValueError("a"), TypeError("b")]))
    assert exception_class_path(stored(group)) == "builtins.ExceptionGroup"


def test_outcomes_without_a_traceback() -> None:
    assert exception_class_path({"error": "cancelled: by hand"}) == "conveyor._errors.Cancel"
    assert exception_class_path({"error": "discarded: bad data"}) == "conveyor._errors.Discard"
    assert exception_class_path(
        {"error": "TimeoutError: task ran past its timeout of 1s"}) == "builtins.TimeoutError"
    assert exception_class_path(
        {"error": "unknown task 'x': no task of that name"}) == "conveyor._errors.ConveyorError"
    assert exception_class_path({}) == "conveyor._errors.ConveyorError"
