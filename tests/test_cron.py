"""Cron ticks and misfire policies with a controlled clock (pure functions, no database)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from conveyor import Schedule
from conveyor._cron import check_cron, due_ticks, next_tick, ticks_to_run

PARIS = ZoneInfo("Europe/Paris")


def paris(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=PARIS)


def test_daily_job_runs_once_on_the_fall_back_day() -> None:
    # 2026-10-25: clocks go from 03:00 CEST back to 02:00 CET; 02:30 happens twice.
    after, now = paris(2026, 10, 24, 12), paris(2026, 10, 26, 12)
    ticks = due_ticks("30 2 * * *", "Europe/Paris", after, now, 100)
    assert [t.astimezone(UTC) for t in sorted(ticks)] == [
        datetime(2026, 10, 25, 0, 30, tzinfo=UTC),  # 02:30 CEST, the first pass only
        datetime(2026, 10, 26, 1, 30, tzinfo=UTC),  # 02:30 CET
    ]


def test_daily_job_is_not_lost_on_the_spring_forward_day() -> None:
    # 2026-03-29: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist that day.
    after, now = paris(2026, 3, 28, 12), paris(2026, 3, 30, 12)
    ticks = sorted(due_ticks("30 2 * * *", "Europe/Paris", after, now, 100))
    assert [t.astimezone(UTC) for t in ticks] == [
        datetime(2026, 3, 29, 1, 0, tzinfo=UTC),  # 03:00 CEST, right after the gap
        datetime(2026, 3, 30, 0, 30, tzinfo=UTC),
    ]


def test_wildcard_hour_runs_in_both_passes_of_the_repeated_hour() -> None:
    after, now = paris(2026, 10, 25, 1, 50), paris(2026, 10, 25, 3, 10)
    ticks = sorted(t.astimezone(UTC) for t in due_ticks("*/30 * * * *", "Europe/Paris", after, now, 100))
    # Five distinct instants, thirty minutes apart, across the repeated hour.
    assert [t.strftime("%H:%M") for t in ticks] == ["00:00", "00:30", "01:00", "01:30", "02:00"]
    assert all(b - a == timedelta(minutes=30) for a, b in itertools.pairwise(ticks))


def test_time_zone_decides_the_tick() -> None:
    after = datetime(2026, 1, 1, 0, 0, tzinfo=UTC)
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    assert due_ticks("0 9 * * *", "Europe/Paris", after, now, 5) == [
        datetime(2026, 1, 1, 8, 0, tzinfo=UTC)]
    assert due_ticks("0 9 * * *", "America/New_York", after, now, 5) == []


def test_seconds_field_and_next_tick() -> None:
    start = datetime(2026, 1, 1, 0, 0, 0, 500_000, tzinfo=UTC)
    assert next_tick("*/10 * * * * *", "UTC", start) == datetime(2026, 1, 1, 0, 0, 10, tzinfo=UTC)
    ticks = due_ticks("* * * * * *", "UTC", start, start + timedelta(seconds=3), 10)
    assert len(ticks) == 3 and ticks[0] == datetime(2026, 1, 1, 0, 0, 3, tzinfo=UTC)


@pytest.mark.parametrize(("misfire", "backfill", "expected"), [
    ("skip", 0, ["11:59"]),          # only the on-time tick
    ("run_once", 0, ["11:59"]),      # the newest tick, once
    ("backfill", 3, ["11:57", "11:58", "11:59"]),
])
def test_misfire_policies_after_an_outage(misfire: str, backfill: int, expected: list[str]) -> None:
    # The schedulers were down from 11:00 to 11:59:30; one tick a minute.
    last = datetime(2026, 1, 1, 11, 0, tzinfo=UTC)
    now = datetime(2026, 1, 1, 11, 59, 30, tzinfo=UTC)
    ticks, newest = ticks_to_run("* * * * *", "UTC", misfire, backfill, last, now, grace=60)
    assert [t.strftime("%H:%M") for t in ticks] == expected
    assert newest == datetime(2026, 1, 1, 11, 59, tzinfo=UTC)


def test_skip_drops_every_late_tick() -> None:
    last = datetime(2026, 1, 1, 11, 0, tzinfo=UTC)
    now = datetime(2026, 1, 1, 11, 59, 30, tzinfo=UTC)
    ticks, newest = ticks_to_run("* * * * *", "UTC", "skip", 0, last, now, grace=10)
    assert ticks == [] and newest is not None  # last_tick still moves on


def test_no_tick_due_means_nothing_to_do() -> None:
    now = datetime(2026, 1, 1, 11, 0, 30, tzinfo=UTC)
    assert ticks_to_run("* * * * *", "UTC", "run_once", 0, now, now, 30) == ([], None)


def test_a_long_outage_is_cheap() -> None:
    last = datetime(2020, 1, 1, tzinfo=UTC)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    ticks, _ = ticks_to_run("* * * * * *", "UTC", "backfill", 5, last, now, 30)
    assert len(ticks) == 5 and ticks[-1] == now


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"cron": "61 * * * *"}, "invalid cron"),
    ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, "unknown time zone"),
    ({"cron": "* * * * *", "misfire": "sometimes"}, "misfire"),
    ({"cron": "* * * * *", "backfill": -1}, "backfill"),
])
def test_bad_schedules_are_refused(kwargs: dict[str, object], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        Schedule(name="s", task="t", **kwargs)  # type: ignore[arg-type]


def test_check_cron_accepts_good_expressions() -> None:
    check_cron("0 3 * * MON-FRI", "Europe/Paris")
    check_cron("*/5 * * * * *", "UTC")
