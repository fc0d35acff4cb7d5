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


def test_the_search_reads_one_window_of_ids_below_its_cursor(app: Conveyor) -> None:
    """The window: ``scan`` ids below ``before`` (else the newest), never past the
    oldest job; it says whether older and newer jobs are left unread."""
    ids = _seed(app)
    newest, oldest = max(ids.values()), min(ids.values())
    flt = JobFilter(args_contains=search.check_args_contains({"order_id": 1234}))

    def window(scan: int, **kw: Any) -> tuple[JobFilter, search.Window | None]:
        async def main() -> tuple[JobFilter, search.Window | None]:
            return await search.window(await app.storage(), flt, scan, **kw)
        return app._sync(main())

    bounded, win = window(2)
    assert (bounded.min_id, bounded.max_id) == (newest - 1, newest)
    assert win == search.Window(newest - 1, newest, oldest, newest)
    assert (win.older, win.newer) == (newest - 1, None)
    _, below = window(2, before=newest - 1)
    assert below is not None and (below.low, below.high) == (newest - 3, newest - 2)
    _, above = window(2, after=oldest)
    assert above is not None and (above.low, above.high) == (oldest + 1, oldest + 2)
    assert above.newer == oldest + 2
    _, whole = window(100)
    assert whole is not None and (whole.low, whole.high, whole.older) == (oldest, newest, None)
    _, past = window(2, before=oldest)
    assert past is not None and past.high < past.low and past.older is None
    assert window(2)[0] != flt and search.bound is not None
    # an indexed filter, or one that names its ids already, has no window
    assert app._sync(search.window(app._sync(app.storage()), JobFilter(task="charge"), 2)) == (
        JobFilter(task="charge"), None)


def _orders(app: Conveyor, count: int) -> list[int]:
    """``count`` charge jobs with order ids 0..count-1, oldest first; the oldest one
    finished and archived, so it is found in history."""

    @app.task(name="charge")
    def charge(*args: Any, **kwargs: Any) -> None: ...

    ids = [charge.options(delay=3600).enqueue(order_id=i, even=i % 2 == 0).id
           for i in range(count)]
    app.cancel_job(ids[0])

    async def archive() -> None:
        await Archiver(await app.storage(), None, 1.0, after=0.0).run_once()

    app._sync(archive())
    return ids


def test_a_job_older_than_the_window_is_found_by_going_on(
        app: Conveyor, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 31: each request reads ``SCAN`` ids at most; ``next_before_id`` goes on
    below the window, so the oldest order is reached, window after window."""
    monkeypatch.setattr(search, "SCAN", 3)
    ids = _orders(app, 10)
    want = {"order_id": 0}
    assert app.list_jobs(args_contains=want) == []  # not among the newest 3 ids
    page = app.search_jobs(args_contains=want)
    assert page.jobs == [] and (page.scanned_from, page.scanned_to) == (ids[7], ids[9])
    assert page.next_before_id == ids[7]
    requests = 1
    while not page.jobs:
        assert page.next_before_id is not None
        page = app.search_jobs(args_contains=want, before_id=page.next_before_id)
        assert page.scanned_from is not None and page.scanned_to is not None
        assert page.scanned_to - page.scanned_from < 3  # each request stays bounded
        requests += 1
    assert [j.id for j in page.jobs] == [ids[0]] and requests == 4
    assert page.jobs[0].state.value == "cancelled"  # from history
    assert page.next_before_id is None  # the oldest job's window: nothing left
    # list_jobs' window moves with before_id too
    assert [j.id for j in app.list_jobs(args_contains=want, before_id=ids[2])] == [ids[0]]
    # a full page goes on below its last job, inside the window; a page whose window
    # holds no more matches goes on below the window
    evens = app.search_jobs(args_contains={"even": True}, limit=1)
    assert [j.id for j in evens.jobs] == [ids[8]] and evens.next_before_id == ids[7]
    full = app.search_jobs(args_contains={"even": False}, limit=1)
    assert [j.id for j in full.jobs] == [ids[9]] and full.next_before_id == ids[9]
    seen: list[int] = []
    cursor: int | None = None
    while True:
        step = app.search_jobs(args_contains={"even": True}, limit=2, before_id=cursor)
        seen += [j.id for j in step.jobs]
        if (cursor := step.next_before_id) is None:
            break
    assert seen == ids[8::-2]
    # without a tag or argument an index serves it: pages by id, no window
    plain = app.search_jobs(task="charge", limit=4)
    assert plain.scanned_from is None and plain.next_before_id == plain.jobs[-1].id


@pytest.mark.parametrize("bad", ["5", -1, 0, True, 1.5])
def test_a_bad_before_id_is_refused_clearly(app: Conveyor, bad: Any) -> None:
    for call in (app.list_jobs, app.search_jobs):
        with pytest.raises(TypeError, match="before_id must be a positive int"):
            call(before_id=bad, args_contains={"order_id": 1})


def test_cli_says_where_the_window_ended_and_goes_on(
        app: Conveyor, db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search, "SCAN", 3)
    ids = _orders(app, 10)

    def run(*args: str) -> Any:
        result = invoke("jobs", "list", "--url", db_url, "--arg", "order_id=0", *args)
        assert result.exit_code == 0, result.output
        return result

    first = run()
    assert "no jobs match" in first.stdout
    assert f"searched jobs #{ids[7]} to #{ids[9]} only" in first.stdout
    assert f"--before-id {ids[7]}" in first.stdout
    cursor = ids[7]
    for _ in range(2):  # two more empty windows, each naming the next cursor
        out = run("--before-id", str(cursor)).stdout
        cursor = int(out.split("--before-id ")[1].split()[0])
    found = run("--before-id", str(cursor))
    assert f"{ids[0]} " in found.stdout and "--before-id" not in found.stdout
    many = run("--windows", "10", "--json")
    assert [j["id"] for j in json.loads(many.stdout)] == [ids[0]]
    few = run("--windows", "2", "--json")
    assert json.loads(few.stdout) == [] and f"--before-id {ids[4]}" in few.stderr
    assert f"searched jobs #{ids[4]} to #{ids[9]}" in few.stderr
    for bad in (["--before-id", "x"], ["--before-id", "-3"], ["--before-id", "0"],
                ["--windows", "0"]):
        result = invoke("jobs", "list", "--url", db_url, "--arg", "order_id=0", *bad)
        assert result.exit_code == 2 and "--" in result.output, (bad, result.output)


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
