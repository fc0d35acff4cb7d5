"""Finding jobs by tag and by keyword-argument value (issue 31, "the dashboard over
days"): ``list_jobs(tag=, args_contains=)``, ``conveyor jobs list --tag/--arg``, on both
backends, in the hot table and in history; what args_contains matches (keyword
arguments by name, nested dicts by path, scalars by value) and what it refuses."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conveyor import Conveyor
from conveyor._app import search
from conveyor._runtime.archiver import Archiver
from conveyor._storage import JobFilter

from .test_cli import invoke


def _seed(app: Conveyor) -> dict[str, int]:
    """Jobs with known kwargs and tags; the finished ones moved to history."""

    @app.task(name="charge")
    def charge(*args: Any, **kwargs: Any) -> None: ...

    def later(**options: Any) -> Any:
        return charge.options(delay=3600, **options)

    ids = {
        "a": later(tags=["vip", "eu"]).enqueue(
            order_id=1234, customer={"id": 7, "tier": "gold"}).id,
        "b": later(tags=["eu"]).enqueue(order_id=1235, note="1234").id,
        "c": later().enqueue(1234, flag=True).id,  # 1234 positional: never matched by name
        "d": later(tags=["vip"]).enqueue(order_id=1234.0, flag=1, nothing=None).id,
        "e": later().enqueue(order_id=[1234], customer={"id": "7"}).id,
    }
    app.cancel_job(ids["d"])  # finished: archived below, found in history

    async def archive() -> None:
        await Archiver(await app.storage(), None, 1.0, after=0.0).run_once()

    app._sync(archive())
    return ids


def _names(ids: dict[str, int], found: set[int]) -> set[str]:
    return {name for name, i in ids.items() if i in found}


def test_tag_and_args_contains_match_keyword_arguments_by_value(app: Conveyor) -> None:
    ids = _seed(app)

    def names(**kwargs: Any) -> set[str]:
        return _names(ids, {j.id for j in app.list_jobs(limit=100, **kwargs)})

    assert names(tag="vip") == {"a", "d"}  # d lives in history now
    assert names(tag="eu") == {"a", "b"}
    assert names(tag="nope") == set()
    # a number matches its equal number (1234.0 too), never a string, a list or a
    # positional value
    assert names(args_contains={"order_id": 1234}) == {"a", "d"}
    assert names(args_contains={"order_id": "1234"}) == set()
    assert names(args_contains={"note": "1234"}) == {"b"}
    # nested dicts match by path, the rest of the dict is free
    assert names(args_contains={"customer": {"id": 7}}) == {"a"}
    assert names(args_contains={"customer": {"id": "7"}}) == {"e"}
    both = {"customer": {"id": 7, "tier": "gold"}, "order_id": 1234}
    assert names(args_contains=both) == {"a"}
    assert names(args_contains={"customer": {"id": 7, "tier": "silver"}}) == set()
    # true is not 1; None matches a null value but not a missing key
    assert names(args_contains={"flag": True}) == {"c"}
    assert names(args_contains={"flag": 1}) == {"d"}
    assert names(args_contains={"nothing": None}) == {"d"}
    assert names(args_contains={"missing": None}) == set()
    # with the other filters
    assert names(args_contains={"order_id": 1234}, tag="eu") == {"a"}
    assert names(args_contains={"order_id": 1234}, state="cancelled") == {"d"}
    assert names(args_contains={"order_id": 1234}, queue="other") == set()
    newest = app.list_jobs(args_contains={"order_id": 1234}, limit=1)
    assert [j.id for j in newest] == [ids["d"]]
    older = app.list_jobs(args_contains={"order_id": 1234}, before_id=ids["d"])
    assert [j.id for j in older] == [ids["a"]]


@pytest.mark.parametrize(("value", "error"), [
    ([("order_id", 1)], TypeError),
    ("order_id=1", TypeError),
    ({}, ValueError),
    ({"order_id": [1234]}, ValueError),
    ({"order_id": float("nan")}, ValueError),
    ({"a": {}}, ValueError),
    ({'we"ird': 1}, ValueError),
    ({1: 1}, ValueError),
    ({f"k{i}": i for i in range(17)}, ValueError),
    ({"a": {"b": {"c": {"d": {"e": 1}}}}}, ValueError),
    ({"a": "x" * 5000}, ValueError),
])
def test_args_contains_refuses_what_it_cannot_match(app: Conveyor, value: Any,
                                                    error: type[Exception]) -> None:
    with pytest.raises(error):
        app.list_jobs(args_contains=value)


def test_tag_refuses_wrong_types(app: Conveyor) -> None:
    with pytest.raises(TypeError):
        app.list_jobs(tag=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        app.list_jobs(tag="")


def test_the_search_is_bounded_to_the_newest_jobs(app: Conveyor) -> None:
    ids = _seed(app)

    async def bounded(scan: int) -> JobFilter:
        flt = JobFilter(args_contains=search.check_args_contains({"order_id": 1234}))
        return await search.bound(await app.storage(), flt, scan)

    flt = app._sync(bounded(2))
    assert flt.min_id == max(ids.values()) - 1
    assert app._sync(bounded(100)).min_id is None


def test_arg_pairs_parse_as_json_else_text() -> None:
    assert search.args_from_pairs(["order_id=1234", "note=abc", "s=\"12\"", "c.id=7",
                                   "c.tier=gold", "x=", "f=true"]) == {
        "order_id": 1234, "note": "abc", "s": "12", "c": {"id": 7, "tier": "gold"},
        "x": "", "f": True}
    for bad in ("order_id", "=3", "a=1 a.b=2"):
        with pytest.raises(ValueError):
            search.args_from_pairs(bad.split(" "))


def test_cli_lists_by_tag_and_argument(app: Conveyor, db_url: str) -> None:
    ids = _seed(app)

    def listed(*args: str) -> set[str]:
        result = invoke("jobs", "list", "--json", "--url", db_url, *args)
        assert result.exit_code == 0, result.output
        return _names(ids, {j["id"] for j in json.loads(result.stdout)})

    assert listed("--tag", "vip") == {"a", "d"}
    assert listed("--arg", "order_id=1234") == {"a", "d"}
    assert listed("--arg", 'order_id="1234"') == set()
    assert listed("--arg", "note=1234") == set()  # 1234 parses as a number
    assert listed("--arg", 'note="1234"') == {"b"}
    assert listed("--arg", "customer.id=7", "--arg", "order_id=1234", "--tag", "eu") == {"a"}
    table = invoke("jobs", "list", "--url", db_url, "--arg", "order_id=1234", "--limit", "1")
    assert table.exit_code == 0 and "charge" in table.stdout
    for bad in (["--arg", "order_id"], ["--arg", "=1"], ["--arg", "a=[1]"],
                ["--arg", "a=1", "--arg", "a.b=2"], ["--tag", ""]):
        result = invoke("jobs", "list", "--url", db_url, *bad)
        assert result.exit_code == 2, (bad, result.output)
