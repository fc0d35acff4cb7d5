"""Finding jobs by a tag or an argument value (``list_jobs(tag=, args_contains=)``, the
CLI's ``--tag``/``--arg``, the dashboard's search box, the HTTP API): the checks of the
filter, and the window of ids that keeps each such request fast on any table while a
caller still reaches every job by going on from window to window.

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

from .. import _payload
from .._job import MAX_ID, Job, JobState
from .._storage import JobFilter, JobListParams, JobSearchParams

if TYPE_CHECKING:
    from .._storage import Storage

#: A search in arguments (or by tag) reads at most this many job ids per request, a
#: window that moves with the keyset cursor (``before_id``): neither can use an index on
#: the hot table, so each request has a fixed bound whatever the size of history, and a
#: caller goes on to older jobs window by window (the dashboard's text search shares it).
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
    """A filter whose search has no index to use: it reads one window of ids at a time."""
    return bool(flt.text or flt.args_contains or flt.tag)


@dataclasses.dataclass(frozen=True, slots=True)
class Window:
    """The ids one bounded search read, ``low`` to ``high`` (both included; empty when
    ``high < low``), and the ids any job has (``oldest`` to ``newest``), so a caller
    knows whether older or newer jobs were left unread."""

    low: int
    high: int
    oldest: int
    newest: int

    @property
    def older(self) -> int | None:
        """The ``before_id`` that searches the next window down; None: none is left."""
        return self.low if self.low > self.oldest else None

    @property
    def newer(self) -> int | None:
        """The ``after_id`` that searches the next window up; None: none is left."""
        return self.high if self.high < self.newest else None


async def _edge(storage: Storage, newest: bool) -> int | None:
    """The newest (or oldest) job's id: one index lookup at an end of the id index."""
    params = (JobSearchParams(JobFilter(), 1) if newest
              else JobSearchParams(JobFilter(), 1, after_id=0))
    found = await storage.job_search(params)
    return found[0].id if found else None


async def window(storage: Storage, flt: JobFilter, scan: int | None = None, *,
                 before: int | None = None,
                 after: int | None = None) -> tuple[JobFilter, Window | None]:
    """``flt`` limited to one window of ``scan`` (default ``SCAN``) ids when its search
    cannot use an index: the ids just below ``before`` (or just above ``after``, or the
    newest ones), so each request reads ``scan`` ids at most and a caller reaches older
    jobs by searching again from the window's ``older`` edge (ids grow with time; both
    ends of the id index are one lookup away). No window (None) for an indexed filter,
    an empty table, or a filter that already names its ids (``min_id``)."""
    scan = SCAN if scan is None else scan
    if not scanned(flt) or flt.min_id is not None or flt.max_id is not None:
        return flt, None
    newest, oldest = await _edge(storage, True), await _edge(storage, False)
    if newest is None or oldest is None:
        return flt, None
    if after is not None:
        low = max(after + 1, oldest)
        high = min(low + scan - 1, newest)
    else:
        high = newest if before is None else min(before - 1, newest)
        low = max(high - scan + 1, oldest)
    return dataclasses.replace(flt, min_id=low, max_id=high), Window(low, high, oldest, newest)


async def bound(storage: Storage, flt: JobFilter, scan: int | None = None, *,
                before: int | None = None) -> JobFilter:
    """``flt`` limited to the window of ids below ``before`` (``window``)."""
    return (await window(storage, flt, scan, before=before))[0]


@dataclasses.dataclass(frozen=True, slots=True)
class SearchPage:
    """One page of ``app.search_jobs``: the jobs found, newest first, and where to go on.

    A search by tag or argument cannot use an index, so each call reads one window of
    at most 100,000 job ids (``scanned_from`` to ``scanned_to``, hot table and history
    together) and stays fast whatever the size of history. ``next_before_id`` is the
    ``before_id`` of the next call: below the last job when the page is full, else
    below the window, so a loop that calls again while it is not None reaches every
    match, window after window. None: nothing older is left to read.

    Example::

        page = app.search_jobs(args_contains={"order_id": 1234})
        while not page.jobs and page.next_before_id is not None:
            page = app.search_jobs(args_contains={"order_id": 1234},
                                   before_id=page.next_before_id)
    """

    jobs: list[Job]
    #: The next call's ``before_id``; None when no older job is left to search.
    next_before_id: int | None
    #: The ids this call read, oldest and newest; None for a search that needs no
    #: window (no tag, no argument: an index serves it) or an empty table.
    scanned_from: int | None = None
    scanned_to: int | None = None


async def search_page(storage: Storage, flt: JobFilter, limit: int,
                      before: int | None = None, scan: int | None = None) -> SearchPage:
    """The jobs matching ``flt`` below ``before`` in one window, and where to go on:
    ``SearchPage`` as the app, the CLI and the HTTP API give it."""
    flt, win = await window(storage, flt, scan, before=before)
    found = await storage.job_search(JobSearchParams(flt, limit + 1, before))
    jobs = found[:limit]
    if len(found) > limit:
        return SearchPage(jobs, jobs[-1].id, *_edges(win))
    return SearchPage(jobs, win.older if win is not None else None, *_edges(win))


def _edges(win: Window | None) -> tuple[int | None, int | None]:
    return (None, None) if win is None else (win.low, win.high)


def check_before_id(before_id: object) -> int | None:
    """``list_jobs(before_id=)``: past the 64-bit range, every job is before it."""
    if before_id is None or (type(before_id) is int and before_id > MAX_ID):
        return None
    if type(before_id) is not int or before_id < 1:  # never a bool, a str or 0
        raise TypeError(f"before_id must be a positive int (a job id), got {before_id!r}")
    return before_id


def list_params(state: JobState | str | None, queue: str | None, task: str | None,
                limit: object, before_id: object) -> JobListParams:
    """``list_jobs``' arguments checked, as both list and search take them."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise ValueError("limit must be an int from 1 to 10000")
    return JobListParams(
        state=JobState(state) if state is not None else None,
        queue=_payload.check_queue_name(queue) if queue is not None else None,
        task=_payload.check_task_name(task) if task is not None else None,
        limit=limit, before_id=check_before_id(before_id))


def search_filter(params: JobListParams, tag: str | None,
                  args_contains: Mapping[str, Any] | None) -> JobFilter:
    """The filter of a search by tag or argument value (either may be None: then any)."""
    return JobFilter(
        states=(params.state,) if params.state else (), queue=params.queue,
        task=params.task, tag=check_tag(tag) if tag is not None else None,
        args_contains=(check_args_contains(args_contains)
                       if args_contains is not None else None))
