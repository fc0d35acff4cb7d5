"""The dashboard over days (issue 31): charts over 1 hour, 24 hours and 7 days for the
cluster, a queue and a task, summed per point in SQL (at most 288 points a series), the
range in the URL (an unknown one is a 400); and the jobs page's argument search box.
Both backends, real databases."""

from __future__ import annotations

import re
import time

from conveyor import Conveyor
from conveyor._app import reads
from conveyor._app.operations import Operations
from conveyor._storage import MetricRow

from .conftest import Browser

DAY = 86_400.0


def _minute(ts: float) -> float:
    return ts // 60 * 60


def _load_week(app: Conveyor) -> dict[str, float]:
    """Completed jobs every 7th minute over the last 7 days: queue a/task t1 one each,
    queue b/task t2 two each; the expected totals per range for each scope."""
    now = time.time()
    rows: list[MetricRow] = []
    for i in range(0, 7 * 24 * 60, 7):
        bucket = _minute(now) - 60.0 * i
        rows.append(MetricRow("a", "t1", "completed", 1.0, bucket))
        rows.append(MetricRow("b", "t2", "completed", 2.0, bucket))
        rows.append(MetricRow("b", "t2", "discarded", 1.0, bucket))

    async def add() -> None:
        storage = await app.storage()
        for start in range(0, len(rows), 500):
            await storage.metrics_add(rows[start:start + 500])

    app._sync(add())
    return {"bucket_now": _minute(now)}


def _series(app: Conveyor, rng: str, **scope: str) -> reads.Series:
    async def read() -> reads.Series:
        return await reads.series(Operations(app), reads.RANGES[rng],
                                  queue=scope.get("queue"), task=scope.get("task"))

    return app._sync(read())


def test_ranges_are_downsampled_in_sql_with_bounded_points(app: Conveyor) -> None:
    _load_week(app)
    expected_points = {"1h": 60, "24h": 288, "7d": 168}
    for name, points in expected_points.items():
        rng = reads.RANGES[name]
        cluster = _series(app, name)
        assert len(cluster.minutes) == len(cluster.completed) == points <= 288
        assert all(b - a == rng.step for a, b in zip(cluster.minutes, cluster.minutes[1:],
                                                     strict=False))
        first = cluster.minutes[0]
        # every 7th minute since the window's first point: a 1, b 2, b's discards 1
        n = sum(1 for i in range(0, 7 * 24 * 60, 7)
                if _minute(time.time()) - 60.0 * i >= first)
        # (a point may straddle a minute boundary passing: allow one sample of slack)
        assert abs(cluster.hour_completed - 3 * n) <= 3, name
        assert abs(cluster.hour_failed - n) <= 1, name
        queue_a = _series(app, name, queue="a")
        assert abs(queue_a.hour_completed - n) <= 1 and queue_a.hour_failed == 0
        task_t2 = _series(app, name, task="t2")
        assert abs(task_t2.hour_completed - 2 * n) <= 2
        assert len(task_t2.minutes) == points
        assert task_t2.depth["available"] == [None] * points  # a task has no depth
    week = _series(app, "7d")
    # an hourly point holds 8 or 9 samples of every 7th minute: 3 jobs each
    full = [v for v in week.completed[1:-1]]
    assert full and all(24 <= v <= 27 for v in full)


def test_depth_is_downsampled_to_its_peak_per_point(app: Conveyor) -> None:
    @app.task(queue="deep")
    def later() -> None: ...

    async def sample(buckets: list[float]) -> None:
        storage = await app.storage()
        for bucket in buckets:
            await storage.metrics_depth_sample(bucket)

    now = _minute(time.time())
    later.options(delay=3600).enqueue()
    app._sync(sample([now - 3600 * 5, now - 3600 * 5 + 60]))
    later.options(delay=3600).enqueue()
    app._sync(sample([now - 3600 * 5 + 120]))
    day = _series(app, "24h", queue="deep")
    assert max(v or 0 for v in day.depth["scheduled"]) == 2
    assert sum(1 for v in day.depth["scheduled"] if v is not None) in (1, 2)
    assert max(v or 0 for v in _series(app, "7d").depth["scheduled"]) == 2


def _points_per_chart(html: str) -> list[int]:
    return [len(re.findall(r'<rect class="hover"', svg))
            for svg in re.findall(r"<svg.*?</svg>", html, flags=re.S)]


def test_range_in_the_url_on_every_chart_page(browser: Browser, world: Conveyor) -> None:
    _load_week(world)
    for path in ("/", "/queues/billing", "/tasks/charge", "/queues/a", "/tasks/t1"):
        for name, points in (("1h", 60), ("24h", 288), ("7d", 168)):
            page = browser.get(f"{path}?range={name}")
            assert page.status_code == 200, (path, name)
            assert f'data-range="{name}"' in page.text
            assert f'<strong aria-current="true">{name}</strong>' in page.text
            counts = _points_per_chart(page.text)
            assert counts and set(counts) == {points}, (path, name)
        assert browser.get(path).text.count('data-range="1h"') == 1  # the default
        bad = browser.get(f"{path}?range=30d")
        assert bad.status_code == 400 and "1h, 24h, 7d" in bad.text
    assert len(_points_per_chart(browser.get("/tasks/charge").text)) == 3  # no depth
    assert len(_points_per_chart(browser.get("/queues/billing").text)) == 4
    assert 'href="/queues/billing"' in browser.get("/queues").text
    assert 'href="/tasks/charge"' in browser.get("/jobs?task=charge").text
    assert "Mon" in browser.get("/?range=7d").text or "Sun" in browser.get("/?range=7d").text


def test_the_jobs_search_box_finds_a_keyword_argument(browser: Browser,
                                                     world: Conveyor) -> None:
    resized = {j.id: j.kwargs["width"] for j in world.list_jobs(task="resize", limit=100)}
    page = browser.get("/jobs?arg=width%3D205")
    shown = [int(i) for i in re.findall(r'<tr data-job="(\d+)"', page.text)]
    assert shown and all(resized[i] == 205 for i in shown)
    assert re.search(r"searched jobs #\d+ to #\d+", page.text)
    assert browser.get("/jobs?arg=width%3D%22205%22").text.count("<tr data-job=") == 0
    both = browser.get("/jobs?arg=width%3D205&tag=none").text
    assert both.count("<tr data-job=") == 0
    for bad in ("width", "%3D1", "width%3D%5B1%5D"):
        assert browser.get(f"/jobs?arg={bad}").status_code == 400, bad
