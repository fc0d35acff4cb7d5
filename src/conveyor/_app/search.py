"""Finding jobs by a tag or an argument value (``list_jobs(tag=, args_contains=)``, the
CLI's ``--tag``/``--arg``, the dashboard's search box): the checks of the filter, and the
bound that keeps such a search fast on any table.

``args_contains`` matches keyword arguments by name, never positional ones (a job
enqueued ``charge(1234)`` has no name for its 1234; search its text instead). A nested
dict matches by path: ``{"order": {"id": 7}}`` matches ``order={"id": 7, "sku": "x"}``.
The values it gives (the leaves) are JSON scalars compared by value (``1`` matches
``1.0``, never ``"1"`` or ``true``); lists are refused, as both backends would read them
differently. Sealed arguments (``encrypt=True``) never match.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._storage import JobFilter, JobSearchParams

if TYPE_CHECKING:
    from .._storage import Storage

#: A search in arguments (or by tag) reads at most the newest this many jobs: neither
#: can use an index on the hot table, so the scan has a fixed bound whatever the size
#: of history (the dashboard's text search shares it).
SCAN = 100_000
#: Most leaves (values to match) and nesting depth an ``args_contains`` takes.
MAX_LEAVES = 16
MAX_DEPTH = 4
#: Longest ``args_contains`` as JSON, and longest tag.
MAX_CHARS = 4096
MAX_TAG = 200


def check_tag(tag: object) -> str:
    if not isinstance(tag, str):
        raise TypeError(f"tag must be a str, not {type(tag).__name__}")
    if not tag or len(tag) > MAX_TAG:
        raise ValueError(f"tag must be 1 to {MAX_TAG} characters")
    return tag


def check_args_contains(value: object) -> str:
    """The filter as canonical JSON (sorted keys), checked: a non-empty dict of
    str keys whose leaves are JSON scalars."""
    if not isinstance(value, Mapping):
        raise TypeError(f"args_contains must be a dict of keyword arguments, "
                        f"not {type(value).__name__}")
    leaves(value)
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    if len(text) > MAX_CHARS:
        raise ValueError(f"args_contains is over {MAX_CHARS} characters as JSON")
    return text


def leaves(value: Mapping[Any, Any],
           path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Each value to match with its path of keys, e.g. ``(("order", "id"), 7)``."""
    if not value:
        raise ValueError("args_contains needs at least one key" if not path
                         else f"args_contains: {'.'.join(path)} is an empty dict")
    if len(path) >= MAX_DEPTH:
        raise ValueError(f"args_contains nests deeper than {MAX_DEPTH} levels")
    found: list[tuple[tuple[str, ...], Any]] = []
    for key, item in value.items():
        if not isinstance(key, str) or not key or '"' in key or not key.isprintable():
            raise ValueError(f"args_contains: bad key {key!r} (a non-empty printable str "
                             "without double quotes)")
        where = (*path, key)
        if isinstance(item, Mapping):
            found += leaves(item, where)
        elif item is None or isinstance(item, str | int) or (
                isinstance(item, float) and math.isfinite(item)):
            found.append((where, item))
        else:
            raise ValueError(f"args_contains: {'.'.join(where)} must be a str, number, bool, "
                             f"None or a dict, not {type(item).__name__}")
        if len(found) > MAX_LEAVES:
            raise ValueError(f"args_contains gives more than {MAX_LEAVES} values")
    return found


def parse_arg(text: str) -> tuple[str, Any]:
    """``order_id=1234`` (the CLI's ``--arg``, the search box): the value is JSON when
    it parses (``1234``, ``true``, ``"1234"``), else the text itself. A dotted name
    (``order.id=7``) reaches into a dict."""
    name, sep, raw = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"bad argument filter {text!r}: expected NAME=VALUE")
    try:
        value: Any = json.loads(raw)
    except ValueError:
        value = raw
    return name.strip(), value


def args_from_pairs(pairs: list[str]) -> dict[str, Any]:
    """``["order_id=1234", "customer.id=7"]`` as an ``args_contains`` dict."""
    found: dict[str, Any] = {}
    for text in pairs:
        name, value = parse_arg(text)
        *parents, last = name.split(".")
        node = found
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(f"bad argument filter {text!r}: {part} is given a value too")
            node = child
        node[last] = value
    return found


def scanned(flt: JobFilter) -> bool:
    """A filter whose search has no index to use: it is bounded to the newest jobs."""
    return bool(flt.text or flt.args_contains or flt.tag)


async def bound(storage: Storage, flt: JobFilter, scan: int | None = None) -> JobFilter:
    """``flt`` limited to the newest ``scan`` (default ``SCAN``) jobs when its search
    cannot use an index (ids grow with time; the newest id is one index lookup away)."""
    scan = SCAN if scan is None else scan
    if not scanned(flt) or flt.min_id is not None:
        return flt
    newest = await storage.job_search(JobSearchParams(JobFilter(), 1))
    if not newest or newest[0].id <= scan:
        return flt
    return dataclasses.replace(flt, min_id=newest[0].id - scan + 1)
