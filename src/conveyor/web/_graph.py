"""The workflow page's drawing: a layered, left-to-right layout of a workflow's jobs by
dependency depth, as plain boxes and arrows that the template writes out as SVG.

Small workflows get a box per job. Past ``DETAIL_LIMIT`` jobs a box per job would make
a page of megabytes, so each column shows one box per state with its count instead,
and a deep workflow's layers share columns (at most ``MAX_COLUMNS``): the drawing then
costs the same for 10,000 jobs as for 300.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, deque
from collections.abc import Iterable, Sequence

from .._app import WorkflowEdge
from .._job import Job, JobState

#: Above this many jobs a column shows counts per state instead of a box per job.
DETAIL_LIMIT = 200
#: Columns of a grouped drawing at most (a chain of 10,000 shares them).
MAX_COLUMNS = 24
BOX_W, BOX_H, COL_GAP, ROW_GAP, PAD = 168, 40, 64, 12, 8
#: The order of the per-state boxes in a grouped column: the flow of a job's life.
STATE_ORDER = [JobState.PENDING, JobState.SCHEDULED, JobState.AVAILABLE, JobState.RUNNING,
               JobState.RETRYABLE, JobState.COMPLETED, JobState.DISCARDED, JobState.CANCELLED]


@dataclasses.dataclass(frozen=True, slots=True)
class Box:
    """One job (``job_id``), or ``count`` jobs of one state in one column."""

    x: int
    y: int
    state: str
    label: str
    sub: str
    job_id: int | None = None
    count: int = 1

    @property
    def cx(self) -> int:
        return self.x + BOX_W // 2


@dataclasses.dataclass(frozen=True, slots=True)
class Arrow:
    """An edge (or ``count`` edges between two grouped boxes) as an SVG path."""

    path: str
    policy: str
    count: int = 1
    title: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class Graph:
    width: int
    height: int
    boxes: list[Box]
    arrows: list[Arrow]
    #: True when the boxes are counts per state (more than ``DETAIL_LIMIT`` jobs).
    grouped: bool
    #: Dependency depth of the deepest job, plus one.
    layers: int
    box_w: int = BOX_W
    box_h: int = BOX_H


def depths(ids: Sequence[int], edges: Iterable[WorkflowEdge]) -> dict[int, int]:
    """Each job's longest path from a job that waits on nothing in the workflow (edges
    to jobs outside it are ignored). The core refuses cycles; a job on one would keep
    depth 0 rather than loop."""
    inside = set(ids)
    children: dict[int, list[int]] = {i: [] for i in ids}
    waiting = dict.fromkeys(ids, 0)
    for e in edges:
        if e.job_id in inside and e.depends_on in inside:
            children[e.depends_on].append(e.job_id)
            waiting[e.job_id] += 1
    depth = dict.fromkeys(ids, 0)
    ready = deque(i for i in ids if waiting[i] == 0)
    while ready:
        i = ready.popleft()
        for child in children[i]:
            depth[child] = max(depth[child], depth[i] + 1)
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    return depth


def _curve(x1: int, y1: int, x2: int, y2: int) -> str:
    mid = (x1 + x2) // 2
    return f"M{x1} {y1} C{mid} {y1} {mid} {y2} {x2 - 2} {y2}"


def _column_x(column: int) -> int:
    return PAD + column * (BOX_W + COL_GAP)


def _row_y(row: int) -> int:
    return PAD + row * (BOX_H + ROW_GAP)


def _size(columns: int, rows: int) -> tuple[int, int]:
    return (_column_x(max(columns, 1)) - COL_GAP + PAD,
            _row_y(max(rows, 1)) - ROW_GAP + PAD)


def _short(text: str, limit: int = 22) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def layout(jobs: Sequence[Job], edges: Sequence[WorkflowEdge]) -> Graph:
    """The drawing of a workflow: detailed up to ``DETAIL_LIMIT`` jobs, grouped above."""
    depth = depths([j.id for j in jobs], edges)
    layers = max(depth.values(), default=-1) + 1
    if len(jobs) > DETAIL_LIMIT:
        return _grouped(jobs, edges, depth, layers)
    return _detailed(jobs, edges, depth, layers)


def _detailed(jobs: Sequence[Job], edges: Sequence[WorkflowEdge], depth: dict[int, int],
              layers: int) -> Graph:
    """A box per job; within a column, jobs sit near the average row of what they wait
    on (fewer crossings), ties by id."""
    parents: dict[int, list[int]] = {j.id: [] for j in jobs}
    for e in edges:
        if e.job_id in parents and e.depends_on in parents:
            parents[e.job_id].append(e.depends_on)
    columns: list[list[Job]] = [[] for _ in range(layers)]
    for job in jobs:
        columns[depth[job.id]].append(job)
    row: dict[int, float] = {}
    for column in columns:
        def weight(job: Job) -> tuple[float, int]:
            ups = [row[p] for p in parents[job.id] if p in row]
            return (sum(ups) / len(ups) if ups else -1.0, job.id)
        column.sort(key=weight)
        row.update((job.id, float(i)) for i, job in enumerate(column))
    boxes = {j.id: Box(_column_x(depth[j.id]), _row_y(int(row[j.id])), j.state.value,
                       _short(f"#{j.id} {j.task}"), j.state.value, job_id=j.id)
             for j in jobs}
    arrows = [Arrow(_curve(a.x + BOX_W, a.y + BOX_H // 2, b.x, b.y + BOX_H // 2), e.on_failure,
                    title=f"job {e.job_id} waits on job {e.depends_on} ({e.on_failure})")
              for e in edges
              if (a := boxes.get(e.depends_on)) is not None
              and (b := boxes.get(e.job_id)) is not None]
    width, height = _size(layers, max((len(c) for c in columns), default=0))
    return Graph(width, height, list(boxes.values()), arrows, False, layers)


def _grouped(jobs: Sequence[Job], edges: Sequence[WorkflowEdge], depth: dict[int, int],
             layers: int) -> Graph:
    """A box per (column, state) with its count; a column holds ``per`` layers."""
    per = max(1, math.ceil(layers / MAX_COLUMNS))
    columns = math.ceil(layers / per) if layers else 0
    group = {j.id: (depth[j.id] // per, j.state.value) for j in jobs}
    counts = Counter(group.values())
    tasks: dict[tuple[int, str], Counter[str]] = {}
    for job in jobs:
        tasks.setdefault(group[job.id], Counter())[job.task] += 1
    order = {s.value: i for i, s in enumerate(STATE_ORDER)}
    boxes: dict[tuple[int, str], Box] = {}
    tallest = 0
    for column in range(columns):
        keys = sorted((k for k in counts if k[0] == column), key=lambda k: order[k[1]])
        tallest = max(tallest, len(keys))
        first, last = column * per + 1, min((column + 1) * per, layers)
        where = f"layer {first}" if first == last else f"layers {first}-{last}"
        for i, key in enumerate(keys):
            top = tasks[key].most_common(2)
            names = ", ".join(name for name, _ in top) + (" …" if len(tasks[key]) > 2 else "")
            boxes[key] = Box(_column_x(column), _row_y(i), key[1],
                             f"{counts[key]} {key[1]}", _short(f"{where}: {names}", 26),
                             count=counts[key])
    links = Counter((group[e.depends_on], group[e.job_id]) for e in edges
                    if e.depends_on in group and e.job_id in group
                    and group[e.depends_on][0] != group[e.job_id][0])
    arrows = [Arrow(_curve(a.x + BOX_W, a.y + BOX_H // 2, b.x, b.y + BOX_H // 2), "group",
                    n, f"{n} dependency edge(s)")
              for (src, dst), n in sorted(links.items())
              for a, b in [(boxes[src], boxes[dst])]]
    width, height = _size(columns, tallest)
    return Graph(width, height, list(boxes.values()), arrows, True, layers)


__all__ = ["DETAIL_LIMIT", "MAX_COLUMNS", "Arrow", "Box", "Graph", "depths", "layout"]
